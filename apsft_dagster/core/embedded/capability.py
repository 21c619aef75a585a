"""Probe a policy: close rate and exact accuracy, greedy and sampled, on a fixed task list."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from apsft_dagster.core.config import Sampling
from apsft_dagster.core.engines.seeded_sampler import warpers
from apsft_dagster.core.protocol import THINK_CLOSE, format_prompt
from apsft_dagster.core.seeds import seed64
from apsft_dagster.core.tasks import Task, is_correct


def capability_seed(seed: int, round_: int) -> int:
    return seed64("apsft-probe", seed, round_)  # the key predates the rename; kept so seeds do not move


@torch.no_grad()
def complete(model, tokenizer, prompts: Sequence[str], max_new_tokens: int,
             sampling: Sampling | None, seed: int) -> list[str]:
    """Left-padded batch generation to the end of turn; `sampling=None` means greedy."""
    tokenizer.padding_side = "left"
    enc = tokenizer([format_prompt(p) for p in prompts], return_tensors="pt", padding=True,
                    add_special_tokens=False)
    knobs = {"do_sample": False} if sampling is None else {  # Hugging Face's draw, its warpers given in its
        "do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0,  # order: the same scores, top-p unsorted
        "logits_processor": warpers(sampling)}
    torch.manual_seed(seed)
    out = model.generate(**enc, max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, **knobs)
    return tokenizer.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=False)


def capability_report(model, tokenizer, tasks: Sequence[Task], *, allowance: int, sampling: Sampling,
                 samples: int, seed: int, log: Callable[[str], None] = lambda line: None) -> dict:
    """Closed = the completion emits `</think>` within the allowance; correct = parsed answer exact.
    `log` gets one line per round of generation (`[2/3] capability check: sampled round 1`)."""
    prompts = [t.prompt for t in tasks]
    report, done = {}, 0
    for mode, rounds in (("greedy", [None]), ("sampled", [sampling] * samples)):
        closed = correct = total = 0
        for r, knobs in enumerate(rounds):
            done += 1
            log(f"[{done}/{1 + samples}] capability check on {len(prompts)} tasks: {mode}"
                + (f" round {r + 1}" if knobs else ""))
            texts = complete(model, tokenizer, prompts, allowance, knobs, capability_seed(seed, r))
            for task, text in zip(tasks, texts):
                closed += THINK_CLOSE in text
                correct += is_correct(text, task.answer)
                total += 1
        report[f"{mode}_close_rate"] = closed / total
        report[f"{mode}_accuracy"] = correct / total
        report[f"{mode}_completions"] = total
    return report
