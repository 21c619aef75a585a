-- Gap distribution of each potential arm's second rows (best gain minus the chosen trace's gain,
-- nats per token), by how the second was found. p90 is an order statistic (quantile_disc).
select arm, mode, count(*) as rows,
       median(gap) as median_gap, avg(gap) as mean_gap,
       quantile_disc(gap, 0.9) as p90_gap, max(gap) as max_gap
from sft_rows
where arm in (select arm from arms where role = 'potential') and mode <> 'best'
group by arm, mode
order by arm, mode
