"""Stage B end to end through the stage runner, with scripted engines.

A copy of the smoke run's store is taken from Stage A's generations onward with a generation
resource whose engines answer by a script (which policy is right on which task), so Stage A
triggers for answer_potential and every Stage B asset runs for real: the seed-43 pair is trained
and merged (real tiny-model training), every planned policy is evaluated on the Stage B splits
(Stage A's rows reused), the sampled policies draw k samples, and the ladder decides. The
expected figures are computed here from the script, independently of core/stage_b.py.
"""

import shutil
from collections import Counter

import dagster as dg
import polars as pl
import pytest
from pydantic import PrivateAttr

from apsft_dagster.core.engines.base import Completion
from apsft_dagster.core.layout import (
    REPORT_MARKDOWN,
    STAGE_A_DECISION,
    STAGE_B_DECISION,
    STAGE_B_PLAN,
    TASK_CATALOG,
    merged_dir,
    merged_report,
    stage_b_sample_table,
    stage_b_table,
)
from apsft_dagster.core.protocol import prompt_ids
from apsft_dagster.core.store import Store
from apsft_dagster.resources import GenerationResource

K = 2  # the smoke profile's stage_b.k_samples


def scripted_answer(policy: str, task: dict | None, sample: int | None) -> str:
    """answer_potential (either seed) is always right; base is right on a quarter of the tasks
    greedily and on the same quarter in its first sample only; every other policy on half."""
    if task is None:  # a deployment-probe prompt: each policy says something of its own
        return policy
    right, index = task["answer"], task["index"]
    if policy.startswith("answer_potential"):
        return right
    if policy == "base":
        return right if index % 4 == 0 and not sample else "none"
    return right if index % 2 == 0 else "none"


class ScriptedEngine:
    def __init__(self, tokenizer, policy: str, tasks: dict[tuple[int, ...], dict], asked: Counter):
        self.tokenizer, self.policy, self.tasks, self.asked = tokenizer, policy, tasks, asked
        self.stop_token_ids = (tokenizer.convert_tokens_to_ids("<|im_end|>"),)

    def _ids(self, answer: str) -> tuple[int, ...]:
        return tuple(self.tokenizer(f"scripted thought\n</think>\n\nANSWER: {answer}<|im_end|>",
                                    add_special_tokens=False)["input_ids"])

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            task = self.tasks.get(tuple(r.prompt_ids))
            greedy = sampling.temperature == 0
            self.asked[(self.policy, "greedy" if greedy else "sampled")] += 1
            out.append([Completion(self._ids(scripted_answer(self.policy, task, None if greedy else j)), "stop")
                        for j in range(r.n)])
        return out


class ScriptedGeneration(GenerationResource):
    _asked: Counter = PrivateAttr(default_factory=Counter)

    def engine(self, model_dir=None):
        from transformers import AutoTokenizer

        from apsft_dagster.core.base_model import base_model_path

        store = self.experiment.store()
        base = str(base_model_path(self.experiment.config(), store))
        path = str(model_dir or base)
        policy = "base" if path == base else path.rstrip("/").rsplit("/", 1)[-1]
        tokenizer = AutoTokenizer.from_pretrained(base)
        catalog = store.get_parquet(TASK_CATALOG).filter(pl.col("split") != "train")
        tasks = {prompt_ids(tokenizer, t["prompt"]): t for t in catalog.iter_rows(named=True)}
        return ScriptedEngine(tokenizer, policy, tasks, ASKED)

    def release(self) -> None:
        pass


ASKED: Counter = Counter()


@pytest.fixture(scope="module")
def triggered(smoke_run, tmp_path_factory):
    from apsft_dagster.runner import run_stages, select_stages
    from conftest import smoke_resources

    _, source = smoke_run
    store = Store(tmp_path_factory.mktemp("stage_b") / "store")
    shutil.copytree(source.root, store.root)
    resources = smoke_resources(store.root)
    resources["generator"] = ScriptedGeneration(experiment=resources["experiment"])
    from apsft_dagster.definitions import WINGS
    from apsft_dagster.experiment.stages import STAGES

    defs = dg.Definitions.merge(*WINGS, dg.Definitions(resources=resources))
    ASKED.clear()
    outcomes = run_stages(defs, dg.DagsterInstance.ephemeral(), select_stages(STAGES, "stage_a_generations_job"),
                          alert=False)
    assert all(o.ok and not o.skipped for o in outcomes), outcomes
    return store, outcomes, Counter(ASKED)


def test_stage_a_triggers_and_the_plan_names_what_stage_b_runs(triggered):
    store, _, _ = triggered
    decision = store.get_json(STAGE_A_DECISION)["decision"]
    assert decision["verdict"] == "STAGE_B" and decision["triggered"] == ["answer_potential"]
    assert decision["strongest_baseline"] == "random_natural"  # a three-way tie at 0.5: the first
    plan = store.get_json(STAGE_B_PLAN)
    assert plan["replication_policies"] == ["answer_potential-seed43", "random_natural-seed43"]
    assert plan["sampled_policies"] == ["base", "answer_potential-seed42", "random_natural-seed42",
                                        "shortest_natural-seed42", "potential_shuffle-seed42"]


def test_stage_b_reuses_stage_a_rows_and_samples_k_per_task(triggered):
    store, _, asked = triggered
    catalog = store.get_parquet(TASK_CATALOG)
    n = {s: catalog.filter(pl.col("split") == s).height for s in ("core_iid", "core_hard", "held_family", "rendering")}
    stage_a, stage_b = n["core_iid"] + n["core_hard"] + n["held_family"], sum(n.values())
    # Stage A policies: Stage A's tasks once, then only the rendering split for Stage B
    assert asked[("answer_potential-seed42", "greedy")] == stage_a + n["rendering"]
    assert asked[("joint_potential-seed42", "greedy")] == stage_a + n["rendering"]
    # the seed-43 pair: every Stage B task (plus the 8 probe prompts the merge step asks)
    assert asked[("answer_potential-seed43", "greedy")] == stage_b + 8
    for policy in ("base", "answer_potential-seed42", "potential_shuffle-seed42"):
        assert asked[(policy, "sampled")] == stage_b  # one request of k samples per task
    assert asked[("joint_potential-seed42", "sampled")] == 0
    table = store.get_parquet(stage_b_table("random_natural-seed43"))
    assert table.height == stage_b and set(table["split"]) == set(n)
    samples = store.get_parquet(stage_b_sample_table("base"))
    assert samples.height == K * stage_b and set(samples.group_by("task_id").len()["len"]) == {K}


def test_the_ladder_reaches_mission_positive_with_the_scripted_figures(triggered):
    store, outcomes, _ = triggered
    final = store.get_json(STAGE_B_DECISION)
    catalog = store.get_parquet(TASK_CATALOG)
    primary = catalog.filter(pl.col("split").is_in(["core_iid", "rendering"]))
    half = float((primary["index"] % 2 == 0).mean())
    quarter = float((primary["index"] % 4 == 0).mean())
    first, second, third = final["comparison"], final["replication"], final["matched_compute"]
    assert first["margin"] == pytest.approx(1 - half) and first["lower"] > 0 and first["passed"]
    assert second["second_seed_margin"] == pytest.approx(1 - half) and second["pooled_lower"] > 0
    # every scripted completion has the same length on a task, so the treatment's budget pays for
    # exactly one base sample: the vote is base's first sample, right on a quarter of the tasks
    assert third["base_vote_accuracy"] == pytest.approx(quarter) and third["margin"] == pytest.approx(1 - quarter)
    assert final["final_verdict"] == "MISSION_POSITIVE"
    assert final["sampled"]["base"]["pass_at_k"] == pytest.approx(quarter)
    assert final["sampled"]["base"]["sample_accuracy"] == pytest.approx(quarter / K)
    assert final["accuracy"]["answer_potential-seed43"]["rendering"] == 1.0
    checks = {(asset, name): passed for o in outcomes for asset, name, passed in o.checks}
    assert checks[("stage_b_eval", "every_task_once")] and checks[("stage_b_eval", "k_samples_per_task")]
    assert all(checks.values()), checks
    report = store.path(REPORT_MARKDOWN).read_text()
    assert "## Stage B" in report and "**MISSION_POSITIVE**" in report and "rendering" in report


def test_released_weights_keep_receipts_and_refuse_evaluation(triggered, tmp_path):
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.policies import stage_a_policies
    from apsft_dagster.experiment.assets.evaluation import model_of
    from apsft_dagster.experiment.assets.stage_b import released_policies

    store, _, _ = triggered
    config = load_config("smoke")
    config = config.model_copy(update={"merge": config.merge.model_copy(update={"keep_weights": False})})
    fingerprint = store.get_json(merged_report("random_natural-seed43"))["fingerprint"]
    plan = store.get_json(STAGE_B_PLAN)
    released = released_policies(store, config, plan)
    assert released == [*stage_a_policies(config), *plan["replication_policies"]]
    assert not store.path(merged_dir("random_natural-seed43")).exists()
    receipt = store.get_json(merged_report("random_natural-seed43"))
    assert receipt["fingerprint"] == fingerprint and receipt["weights_kept"] is False
    with pytest.raises(RuntimeError, match="random_natural-seed43: its merged weights were released"):
        model_of(store, config, "random_natural-seed43")
    assert released_policies(store, config, store.get_json(STAGE_B_PLAN)) == []  # nothing twice
