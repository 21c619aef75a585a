-- Parity gate residuals: per metric, the max and the mean |fast - reference| over the calibration
-- traces (mean nats per token); the gate compares the max with the frozen threshold.
with maxima as (unpivot (select metrics.* from parity_gate) on columns(*) into name metric value max_abs_diff),
     means as (unpivot (select means.* from parity_gate) on columns(*) into name metric value mean_abs_diff)
select metric, max_abs_diff, mean_abs_diff, threshold, max_abs_diff <= threshold as within_threshold
from maxima join means using (metric)
cross join (select threshold from parity_gate)
order by max_abs_diff desc, metric
