"""The deployment probe (docs/PROTOCOL.md §12): a merged model must answer some fixed prompt
differently from the base under greedy decoding, or it is not evaluated.

Probe prompts come from their own seed space (`seeds.probe_tasks`) over the train families and
levels, and any prompt that equals a catalog prompt (train or eval) is skipped: the probe never
sees an evaluation task. A task file gives its own where it holds probe rows or families of its own
(core/task_file/probe.py; no catalog prompt either, checked when the file is read).
"""

from __future__ import annotations

from collections.abc import Collection

from apsft_dagster.core.config import Config
from apsft_dagster.core.engines.base import GREEDY, GenerationRequest
from apsft_dagster.core.task_file.source import probe_prompts as file_probe_prompts
from apsft_dagster.core.tasks import generate
from apsft_dagster.core.text_protocol import active


def probe_prompts(config: Config, catalog_prompts: Collection[str]) -> list[str]:
    if (filed := file_probe_prompts(config)) is not None:
        return filed
    split, n = config.tasks.train, config.probe.prompts
    cells = [(f, lv) for f in split.families for lv in split.levels]
    prompts, index = [], 0
    while len(prompts) < n:
        for family, level in cells:
            prompt = generate(family, level, index, config.seeds.probe_tasks).prompt
            if prompt not in catalog_prompts and prompt not in prompts and len(prompts) < n:
                prompts.append(prompt)
        index += 1
    return prompts


def greedy_outputs(engine, prompts: list[str], max_tokens: int) -> list[list[int]]:
    requests = [GenerationRequest(active().prompt_ids(engine.tokenizer, p), 1, max_tokens, 0) for p in prompts]
    return [list(samples[0].token_ids) for samples in engine.generate(requests, GREEDY)]


def compare(prompts: list[str], base: list[list[int]], merged: list[list[int]], decode) -> dict:
    """How many prompts differ, and the first differing pair (decoded)."""
    differing = [i for i, (a, b) in enumerate(zip(base, merged)) if a != b]
    first = None if not differing else {"prompt": prompts[differing[0]], "base": decode(base[differing[0]]),
                                        "merged": decode(merged[differing[0]])}
    return {"prompts": len(prompts), "differing": len(differing), "passed": bool(differing),
            "differing_indices": differing, "first_difference": first}
