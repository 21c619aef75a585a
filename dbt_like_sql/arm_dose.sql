-- Training dose per arm: rows, thought tokens, and forward tokens at the configured epochs
-- (each record counted with the base tokenizer, capped at training.max_length).
select r.arm, count(*) as rows,
       sum(r.n_thought_tokens) as thought_tokens,
       sum(r.n_forward_tokens) * any_value(m.epochs) as forward_tokens,
       any_value(m.epochs) as epochs,
       any_value(m.device_hours.low) as device_hours_low,
       any_value(m.device_hours.high) as device_hours_high
from sft_rows r
join sft_manifest m on m.arm = r.arm
group by r.arm
order by r.arm
