-- RL run report: per run, saved step and selected hack signal (the profile's run_report.signals),
-- the samples, how many the signal flags and their share.
select run, step, signal, count(*) as samples, sum(fired::int) as flagged, round(avg(fired::int), 6) as share
from rl_sample_signals
group by run, step, signal
order by run, step, signal
