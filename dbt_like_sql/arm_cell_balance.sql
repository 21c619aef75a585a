-- Per arm x family x level (every cell of the catalog's train split, also cells an arm left empty):
-- tasks and rows against the cell's train tasks; `balanced` = every task present with exactly two rows.
-- status: 'balanced', 'UNBALANCED' (a violation), or 'exempt (<arm>)' for an unbalanced cell of an arm
-- the arm table exempts (success_rft: its support is whatever R1 successes exist, repeats fill its rows).
with cell_tasks as (
    select family, level, count(*) as catalog_tasks
    from task_catalog
    where split = 'train'
    group by family, level
),
arm_cells as (
    select family, level, arm, count(distinct task_id) as tasks, count(*) as rows
    from sft_rows
    group by family, level, arm
),
grid as (
    select a.arm, c.family, c.level, c.catalog_tasks,
           coalesce(x.tasks, 0) as tasks, coalesce(x.rows, 0) as rows
    from (select distinct arm from sft_rows) a
    cross join cell_tasks c
    left join arm_cells x on x.arm = a.arm and x.family = c.family and x.level = c.level
)
select g.arm, g.family, g.level, g.catalog_tasks, g.tasks, g.rows,
       g.tasks = g.catalog_tasks and g.rows = 2 * g.catalog_tasks as balanced,
       case when g.tasks = g.catalog_tasks and g.rows = 2 * g.catalog_tasks then 'balanced'
            when not t.balanced then 'exempt (' || g.arm || ')'
            else 'UNBALANCED' end as status
from grid g
join arms t on t.arm = g.arm
order by g.arm, g.family, g.level
