-- success_rft support: R1-successful eligible traces in the bank, the distinct sources the arm
-- uses, the tasks and cells they come from, and how much of the arm is round-robin repetition.
with rft as (select * from sft_rows where arm in (select arm from arms where row_rule = 'success')),
     uses as (select source_trace_id, count(*) as n from rft group by source_trace_id)
select (select count(*) from r1_labels where success) as successful_traces_in_bank,
       (select count(distinct task_id) from r1_labels where success) as tasks_with_a_success,
       count(*) as rows,
       count(distinct rft.source_trace_id) as unique_sources,
       count(distinct rft.task_id) as tasks,
       count(distinct rft.family || '/' || rft.level) as cells,
       count(*) filter (where rft.mode = 'repeat') as repeat_rows,
       (select max(n) from uses) as max_rows_per_source
from rft
