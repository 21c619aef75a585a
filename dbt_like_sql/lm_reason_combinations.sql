-- Loss-mask census: every combination of reasons a masked turn carries, with its count and its
-- share of the dataset's masked turns, beside the turns the rules counted but left alone.
select dataset, kind, name as combination, count as turns,
       round(count / sum(count) over (partition by dataset, kind), 6) as share
from lm_census
where source = 'total' and kind in ('combinations', 'left_alone')
order by dataset, kind, turns desc, combination
