-- Per arm x family x level: tasks and rows against the train tasks the catalog holds in that cell.
-- Every arm but success_rft must hold every task of the cell with exactly two rows.
with cell_tasks as (
    select family, level, count(*) as catalog_tasks
    from task_catalog
    where split = 'train'
    group by family, level
)
select r.arm, r.family, r.level, c.catalog_tasks,
       count(distinct r.task_id) as tasks, count(*) as rows,
       r.arm = 'success_rft'
           or (count(distinct r.task_id) = c.catalog_tasks and count(*) = 2 * c.catalog_tasks) as balanced
from sft_rows r
join cell_tasks c on c.family = r.family and c.level = r.level
group by r.arm, r.family, r.level, c.catalog_tasks
order by r.arm, r.family, r.level
