-- Loss-mask census: turns each rule would mask, per dataset and source, with the share of that
-- source's assistant turns, and the union (a turn with several reasons counts once there).
with turns as (
    select dataset, source, count as assistant_turns
    from lm_census where kind = 'count' and name = 'assistant_turns'
), reasons as (
    select dataset, source, name as reason, count as turns
    from lm_census where kind = 'reasons'
    union all
    select dataset, source, 'union' as reason, count as turns
    from lm_census where kind = 'count' and name = 'masked_turns'
)
select r.dataset, r.source, r.reason, r.turns, t.assistant_turns,
       round(r.turns / t.assistant_turns, 6) as share_of_assistant_turns
from reasons r join turns t using (dataset, source)
order by r.dataset, r.source = 'total', r.source, r.reason
