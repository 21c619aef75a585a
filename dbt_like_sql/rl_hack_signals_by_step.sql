-- RL run report: per run and saved step, the samples, the mean reward and the hacked share (any
-- selected signal), so a rising reward can be read beside them; each signal's share is in
-- rl_hack_signal_shares_by_step (one row per signal: the signals follow each run's profile).
select run, step, count(*) as samples, round(avg(reward), 6) as mean_reward,
       round(avg(hacked::int), 6) as hacked_share
from rl_samples
group by run, step
order by run, step
