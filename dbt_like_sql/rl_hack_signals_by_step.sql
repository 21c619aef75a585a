-- RL run report: per run and saved step, the share of rollout samples each hack signal flags,
-- the hacked share (any signal) and the mean reward, so a rising reward can be read beside them.
select run, step, count(*) as samples, round(avg(reward), 6) as mean_reward,
       round(avg(hacked::int), 6) as hacked_share,
       round(avg(repeated_greetings::int), 6) as repeated_greetings,
       round(avg(phrase_repetition::int), 6) as phrase_repetition,
       round(avg(sign_off_spam::int), 6) as sign_off_spam,
       round(avg(repeated_lines::int), 6) as repeated_lines,
       round(avg(repeated_ngram::int), 6) as repeated_ngram,
       round(avg(over_word_limit::int), 6) as over_word_limit,
       round(avg(unfaithful::int), 6) as unfaithful
from rl_samples
group by run, step
order by run, step
