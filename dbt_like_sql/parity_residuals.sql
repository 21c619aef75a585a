-- Parity gate residuals: per metric, the max |fast - reference| over the calibration traces
-- (mean nats per token), against the frozen threshold.
select metric, max_abs_diff, threshold, max_abs_diff <= threshold as within_threshold
from (unpivot (select metrics.* from parity_gate) on columns(*) into name metric value max_abs_diff)
cross join (select threshold from parity_gate)
order by max_abs_diff desc, metric
