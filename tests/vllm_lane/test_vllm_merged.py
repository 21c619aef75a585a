"""A merged policy served by vLLM (one LLM for the module): the handover's adapter merged into
the base by `merge_snapshot`, loaded by vLLM from the merged snapshot, answers the deployment
probe's prompts as the Transformers engine does on the same files, and differently from the base
on some of them (the probe of docs/PROTOCOL.md §12)."""

from __future__ import annotations

import pytest

from apsft_dagster.core.engines.transformers_engine import TransformersEngine
from apsft_dagster.core.protocol import STOP_TOKENS
from apsft_dagster.core.tasks.catalog import build_catalog
from apsft_dagster.core.training.probe import compare, greedy_outputs, probe_prompts


@pytest.fixture(scope="module")
def served(lane):
    yield from lane.serve(lane.merged, "merged policy (test_vllm_merged)")


@pytest.fixture(scope="module")
def prompts(lane):
    return probe_prompts(lane.config, set(build_catalog(lane.config)["prompt"].to_list()))


def test_the_merged_snapshot_holds_every_pair_of_the_adapter(lane):
    merge, adapter = lane.handover["merge"], lane.handover["adapter"]
    assert merge["lora_pairs"] == merge["changed_tensors"] == adapter["lora_pairs"] == 4 * 7  # 4 blocks x 7 projections


def test_vllm_serves_the_merged_policy_as_transformers_does(lane, served, prompts):
    max_tokens = lane.config.probe.max_new_tokens
    merged = greedy_outputs(served, prompts, max_tokens)
    assert merged == greedy_outputs(TransformersEngine.load(lane.merged, STOP_TOKENS), prompts, max_tokens)


def test_the_probe_sees_the_merged_policy_differ_from_the_base(lane, served, prompts):
    max_tokens = lane.config.probe.max_new_tokens
    base = greedy_outputs(TransformersEngine.load(lane.base, STOP_TOKENS), prompts, max_tokens)
    merged = greedy_outputs(served, prompts, max_tokens)
    probe = compare(prompts, base, merged, served.tokenizer.decode)
    lane.receipt("probe.json", probe)
    assert probe["passed"] and 0 < probe["differing"] <= len(prompts) == lane.config.probe.prompts
