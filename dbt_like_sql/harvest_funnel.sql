-- The harvest funnel per (family, level) cell: traces sampled, natural closes, continuations,
-- exact loops, eligible traces, and what was excluded (ineligible traces, excluded tasks).
select family, level,
       count(distinct task_id) as tasks,
       count(*) as traces,
       count(*) filter (where closed) as closes,
       count(*) filter (where continued) as continuations,
       count(*) filter (where loop) as loops,
       count(*) filter (where eligible) as eligible,
       count(*) filter (where not eligible) as ineligible,
       count(distinct task_id) filter (where task_excluded) as excluded_tasks
from trace_bank
group by family, level
order by family, level
