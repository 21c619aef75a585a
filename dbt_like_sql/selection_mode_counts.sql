-- Selection mode counts per arm: how often the potential rule found an in-band diverse second
-- trace (near_best_diverse) or fell back to the second-ranked (fallback_second), and how many
-- success_rft rows are round-robin repeats.
select arm, mode, count(*) as rows
from sft_rows
group by arm, mode
order by arm, mode
