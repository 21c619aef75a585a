"""`apsft plan`: each figure computed here by hand from the profile's counts, the store's lengths or
the rehearsal's measurements, against what the plan prints; the registered arithmetic (34,446,994
forward tokens at 530-1,000 tokens/s: 9.6-18.1 GPU-hours); and that planning writes nothing."""

import copy
import json
import os
import subprocess
import sys

import polars as pl
import pytest

from apsft_dagster.cli import main
from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ConfigError, PlanError
from apsft_dagster.core.harvest import TRACE_SCHEMA
from apsft_dagster.core.layout import SFT_MANIFEST, STAGE_B_PLAN, TRACE_BANK, shard_file
from apsft_dagster.core.plan import plan, registered
from apsft_dagster.core.plan.pricing import fmt_hours
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.store import Store
from apsft_dagster.core.tasks.catalog import train_task_ids
from conftest import variant_config

REHEARSAL = {"format": "apsft-gpu-rehearsal/1", "tiny": False, "device": "NVIDIA H200",
             "scoring": {"4096": {"tokens": 4096, "tokens_per_s": 9000.0}, "16000": {"tokens": 16000,
                                                                                      "tokens_per_s": 6000.0}},
             "training": {"tokens_per_s": 2000.0, "record_tokens": 16064}, "merge": {"seconds": 40.0},
             "transformers_generation": {"tokens_per_s": 700.0}, "vllm": {"measured": False, "reason": "no vllm"},
             "cpu_laptop_model": {"tokens_per_s": 123.0}}  # a field a later rehearsal may add: ignored


def rows_by_key(config, store=None, rehearsal=None) -> dict[str, dict]:
    return {r["key"]: r for r in plan(config, store, rehearsal)}


def full_config(monkeypatch, tmp_path):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tmp_path / "no-snapshot-here"))
    return load_config("full", require_snapshot=False)


def test_the_upper_bounds_are_the_allowances_times_the_profiles_counts():
    c = load_config("smoke")
    rows = rows_by_key(c)
    h, tasks = c.harvest, c.tasks.train.total
    samples = h.samples_per_task + h.topup_batches * h.topup_size  # every top-up batch, at most
    assert rows["harvest"]["tokens_upper"] == tasks * samples * (h.allowance + h.continuation)
    assert rows["scoring"]["tokens_upper"] == (tasks * samples + tasks) * h.record_limit  # + one empty baseline a task
    rows_per_arm = 2 * tasks
    assert rows["training"]["tokens_upper"] == len(ARMS) * rows_per_arm * min(c.training.max_length, h.record_limit) \
        * c.training.epochs
    stage_a = c.tasks.core_iid.total + c.tasks.core_hard.total + c.tasks.held_family.total
    assert rows["stage_a_evaluation"]["tokens_upper"] == (1 + len(ARMS)) * stage_a * c.evaluation.allowance
    every_b = stage_a + c.tasks.core_iid.total  # + rendering, the core-IID tasks under the second template
    greedy = (1 + len(ARMS)) * c.tasks.core_iid.total + 2 * every_b  # Stage A's rows reused; the seed-43 pair
    sampled = 5 * c.stage_b.k_samples * every_b  # base, winner, its baseline, shortest, shuffle
    assert rows["stage_b_generations"]["tokens_upper"] == (greedy + sampled) * c.evaluation.allowance
    assert rows["stage_b_generations"]["conditional"] and not rows["harvest"]["conditional"]
    hours = c.training.throughput_tokens_per_s
    upper = rows["training"]["tokens_upper"]
    assert rows["training"]["hours_low"] == pytest.approx(upper / hours.high / 3600)
    assert rows["training"]["hours_high"] == pytest.approx(upper / hours.low / 3600)
    assert rows["harvest"]["counts"] == "registered counts" and rows["harvest"]["tokens_expected"] is None
    total = rows["total_Stage_A_path"]
    assert total["hours_high"] == pytest.approx(sum(r["hours_high"] for r in rows.values()
                                                    if r["kind"] == "stage" and not r["conditional"]))


def test_the_registered_matrix_is_9_6_to_18_1_gpu_hours_at_the_registered_envelope(monkeypatch, tmp_path):
    assert sum(registered.FORWARD_TOKENS.values()) == 34_446_994 == registered.MATRIX_FORWARD_TOKENS
    low, high = registered.matrix_hours()
    assert (low, high) == (34_446_994 / 1000 / 3600, 34_446_994 / 530 / 3600)
    assert (fmt_hours(low), fmt_hours(high)) == ("9.6", "18.1")
    rows = rows_by_key(full_config(monkeypatch, tmp_path))
    row = rows["registered_matrix"]
    assert (fmt_hours(row["hours_low"]), fmt_hours(row["hours_high"])) == ("9.6", "18.1")
    assert row["budget"] == "over budget (8.0 h): training stops until `apsft amend`"
    assert rows["training"]["tokens_expected"] == 34_446_994 and rows["training"]["expected_from"] == "registered run"
    # the profile's own envelope is the registered one: the same matrix, 9.6-18.1 h, over its 8 h at both ends
    assert rows["training"]["hours_high"] == pytest.approx(34_446_994 / 530 / 3600)
    assert rows["training"]["hours_low"] == pytest.approx(34_446_994 / 1000 / 3600)
    assert rows["training"]["budget"] == "over budget (8.0 h): training stops until `apsft amend`"
    monkeypatch.setattr(registered, "ENVELOPE_TOKENS_PER_S", {"low": 500.0, "high": 2000.0})
    moved = rows_by_key(full_config(monkeypatch, tmp_path))["registered_matrix"]
    assert (fmt_hours(moved["hours_low"]), fmt_hours(moved["hours_high"])) == (
        fmt_hours(34_446_994 / 2000 / 3600), fmt_hours(34_446_994 / 500 / 3600)) == ("4.8", "19.1")


@pytest.mark.parametrize("hours, text", [(9.5686, "9.6"), (18.0539, "18.1"), (0.0523, "0.052"), (0.5, "0.5"),
                                         (0.0004, "<0.001"), (0, "0")])
def test_hours_are_rounded_to_one_decimal_or_two_significant_figures(hours, text):
    assert fmt_hours(hours) == text


def _tree(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize("profile, shows", [("full", ["9.6-18.1", "model snapshot not found", "registered run"]),
                                            ("laptop", ["embedded model build", "Stage B: generations"])])
def test_the_cli_plans_with_no_snapshot_and_writes_nothing(tmp_path, profile, shows):
    work = tmp_path / "cwd"
    work.mkdir()
    env = {**os.environ, "APSFT_STATE_DIR": str(tmp_path / "state"), "DAGSTER_HOME": str(tmp_path / "dagster"),
           "APSFT_MODEL_DIR": str(tmp_path / "absent"), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("APSFT_STORE_DIR", None)
    before = _tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "apsft_dagster.cli", "plan", "--profile", profile],
                          capture_output=True, text=True, env=env, cwd=work)
    assert proc.returncode == 0, proc.stderr
    assert all(s in proc.stdout for s in shows), proc.stdout
    assert _tree(tmp_path) == before == ["cwd"]  # no state folder, store, Dagster home or file in the cwd
    probe = ("import sys; from apsft_dagster.cli import main; assert main(['plan', '--profile', %r]) == 0; "
             "print(sorted(m for m in ('torch', 'transformers', 'dagster') if m in sys.modules))" % profile)
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=work)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("[]"), proc.stdout + proc.stderr
    assert _tree(tmp_path) == before


def trace_rows(task_id: str, lengths: list[tuple[int, int, int, bool]]) -> pl.DataFrame:
    """A shard of hand-made traces: (generated, thought, record tokens, eligible) each."""
    rows = [{"trace_id": f"{task_id}/main/{i:03d}", "task_id": task_id, "family": "caravan", "level": 1,
             "batch": "main", "sample_index": i, "seed": i, "continuation_seed": None, "thought": "t",
             "token_ids": [1], "n_tokens": n, "n_thought_tokens": thought, "n_record_tokens": record, "closed": ok,
             "continued": False, "loop": False, "loop_period": None, "eligible": ok, "finish_reason": "close",
             "token_sha256": "0" * 64, "task_excluded": False} for i, (n, thought, record, ok) in enumerate(lengths)]
    return pl.DataFrame(rows, schema=TRACE_SCHEMA)


def bank_lengths(i: int) -> list[tuple[int, int, int, bool]]:
    return [(30 + i, 29 + i, 90 + i, True), (50 + 2 * i, 49 + 2 * i, 111 + 2 * i, True), (160, 160, 230, False)]


def test_a_store_with_a_trace_bank_prices_the_harvest_and_scoring_from_its_lengths(tmp_path):
    c = load_config("smoke")
    store = Store(tmp_path / "store")
    tasks = train_task_ids(c)
    for i, t in enumerate(tasks):
        store.put_parquet(shard_file(TRACE_BANK, t), trace_rows(t, bank_lengths(i)))
    rows = rows_by_key(c, store)
    generated = sum(n for i in range(len(tasks)) for n, _, _, _ in bank_lengths(i))
    assert rows["harvest"]["tokens_expected"] == generated
    assert (rows["harvest"]["counts"], rows["harvest"]["expected_from"]) == (f"store {len(tasks)}/{len(tasks)} tasks",
                                                                             "store")
    assert rows["harvest"]["done"] == 1.0 and rows["harvest"]["hours_basis"] == "expected"
    eligible = sum(rec for i in range(len(tasks)) for _, _, rec, ok in bank_lengths(i) if ok)
    empty = sum(min(rec - th for _, th, rec, _ in bank_lengths(i)) for i in range(len(tasks)))  # x + b + y*
    assert rows["scoring"]["tokens_expected"] == eligible + empty
    assert rows["scoring"]["work"].startswith(f"{2 * len(tasks)} eligible traces + {len(tasks)} empty baselines")
    rate = c.plan.generation_tokens_per_s
    assert rows["harvest"]["hours_high"] == pytest.approx(generated / rate.low / 3600)

    partial = Store(tmp_path / "partial")
    for i, t in enumerate(tasks[:3]):
        partial.put_parquet(shard_file(TRACE_BANK, t), trace_rows(t, bank_lengths(i)))
    half = rows_by_key(c, partial)["harvest"]
    held = sum(n for i in range(3) for n, _, _, _ in bank_lengths(i))
    assert half["tokens_expected"] == round(held / 3 * len(tasks)) and half["done"] == pytest.approx(3 / len(tasks))
    profile = variant_config(tmp_path, lambda r: None)
    before = _tree(tmp_path)
    assert main(["plan", "--config", str(profile), "--store", str(partial.root)]) == 0
    assert _tree(tmp_path) == before  # the store read, nothing written


def test_an_inherited_bank_is_imported_not_generated_and_its_lengths_price_the_rest(tmp_path):
    from apsft_dagster.core.bank import export_bank

    smoke = load_config("smoke")
    tasks = train_task_ids(smoke)
    bank = Store(tmp_path / "exported-from")
    for i, t in enumerate(tasks[:4]):
        bank.put_parquet(shard_file(TRACE_BANK, t), trace_rows(t, bank_lengths(i)))
    digest = export_bank(bank, TRACE_BANK, tasks[:4], tmp_path / "bank")
    c = load_config(path=variant_config(tmp_path, lambda r: r["harvest"].update(
        inherited_index=str(tmp_path / "bank" / "index.json"), inherited_index_sha256=digest)))
    rows = rows_by_key(c)
    h = c.harvest
    per_sample, samples = h.allowance + h.continuation, h.samples_per_task + h.topup_batches * h.topup_size
    assert rows["harvest"]["tokens_upper"] == (len(tasks) - 4) * samples * per_sample  # imported, not generated
    held = [sum(n for n, _, _, _ in bank_lengths(i)) for i in range(4)]
    assert rows["harvest"]["tokens_expected"] == round(sum(held) / 4 * (len(tasks) - 4))
    assert rows["harvest"]["expected_from"] == "inherited bank" and "4 tasks inherited" in rows["harvest"]["work"]
    eligible = [sum(rec for _, _, rec, ok in bank_lengths(i) if ok) + min(rec - th for _, th, rec, _ in
                                                                          bank_lengths(i)) for i in range(4)]
    assert rows["scoring"]["tokens_expected"] == round(sum(eligible) / 4 * len(tasks))
    broken = load_config(path=variant_config(tmp_path, lambda r: r["harvest"].update(
        inherited_index=str(tmp_path / "bank" / "index.json"), inherited_index_sha256="0" * 64)))
    harvest = rows_by_key(broken)["harvest"]
    assert harvest["tokens_upper"] == len(tasks) * samples * per_sample
    assert any("inherited bank not usable" in n and "SHA-256" in n for n in harvest["notes"])


def test_the_manifest_and_a_budget_amendment_decide_the_training_verdict(tmp_path):
    from apsft_dagster.core.amendments import record_amendment

    c = load_config("smoke")
    store = Store(tmp_path / "store")
    per_arm = 2_000_000  # 12M forward tokens: 2.2 h even at 1,500 tokens/s, over smoke's 2.0 h
    store.put_json(SFT_MANIFEST, {"arms": [{"arm": a, "sha256": str(i) * 64, "forward_tokens": per_arm}
                                           for i, a in enumerate(ARMS)]})
    row = rows_by_key(c, store)["training"]
    assert row["tokens_expected"] == len(ARMS) * per_arm and row["expected_from"] == "store (sft_manifest)"
    assert row["budget"] == "over budget (2.0 h): training stops until `apsft amend`"
    record_amendment(store, "the smoke budget for this test", "2026-12-03", budget_device_hours=10.0)
    row = rows_by_key(c, store)["training"]
    assert row["budget"] == "within budget (10.0 h)"  # 12M / 400 tokens/s = 8.3 h
    assert any("amendment 1 of 2026-12-03" in n for n in row["notes"])


def test_stage_b_has_nothing_to_price_once_its_plan_says_stage_a_did_not_trigger(tmp_path):
    store = Store(tmp_path / "store")
    store.put_json(STAGE_B_PLAN, {"triggered": False, "reasons": {"answer_potential": ["margin: 0.0100"]},
                                  "greedy_policies": [], "sampled_policies": [], "replication_policies": []})
    rows = plan(load_config("smoke"), store)
    stage_b = [r for r in rows if r["conditional"]]
    assert [r["stage"] for r in stage_b] == ["Stage B"] and stage_b[0]["hours_high"] == 0
    assert "not triggered" in stage_b[0]["work"] and stage_b[0]["counts"] == "store (Stage B plan)"


def write(tmp_path, doc, name="rehearsal.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_a_rehearsal_replaces_each_envelope_by_its_measured_figure(tmp_path):
    c = load_config("smoke")
    mine, measured = rows_by_key(c), rows_by_key(c, rehearsal=write(tmp_path, REHEARSAL))
    train = measured["training"]
    assert train["hours_low"] == train["hours_high"] == pytest.approx(train["tokens_upper"] / 2000.0 / 3600)
    assert mine["training"]["hours_high"] / train["hours_high"] == pytest.approx(2000.0 / 400.0)  # the profile's low
    assert "rehearsal.json on NVIDIA H200: training.tokens_per_s" in train["throughput_source"]
    harvest = measured["harvest"]
    assert harvest["hours_high"] == pytest.approx(harvest["tokens_upper"] / 700.0 / 3600)
    assert "transformers_generation" in harvest["throughput_source"]
    scoring = measured["scoring"]  # the two record lengths measured bound the range
    assert scoring["hours_low"] == pytest.approx(scoring["tokens_upper"] / 9000.0 / 3600)
    assert scoring["hours_high"] == pytest.approx(scoring["tokens_upper"] / 6000.0 / 3600)
    merge = measured["merge"]
    probe = 7 * c.probe.prompts * c.probe.max_new_tokens
    assert merge["hours_high"] == pytest.approx((len(ARMS) * 40.0 + probe / 700.0) / 3600)
    assert "profile plan.pretrain_step_seconds" in measured["model_build"]["throughput_source"]  # not measured


def test_a_cpu_rehearsal_of_an_embedded_profile_prices_the_builds_steps_as_timed(tmp_path):
    """benchmarks/bench_plan.py times a pretraining step; where the file has it, the build's steps
    are priced at it (the capability check stays at the generation figure)."""
    c = load_config("smoke")
    doc = {**copy.deepcopy(REHEARSAL), "pretrain_step": {"seconds": 0.5}}
    timed = rows_by_key(c, rehearsal=write(tmp_path, doc))["model_build"]
    untimed = rows_by_key(c, rehearsal=write(tmp_path, REHEARSAL, "plain.json"))["model_build"]
    steps = c.embedded.train_steps
    assert timed["hours_high"] - untimed["hours_high"] == pytest.approx(
        steps * (0.5 - c.plan.pretrain_step_seconds.high) / 3600)
    assert "pretrain_step.seconds" in timed["throughput_source"]


def test_on_vllm_the_rehearsal_prices_generation_with_vllm_where_it_was_measured(tmp_path):
    c = load_config("smoke_vllm")
    unmeasured = rows_by_key(c, rehearsal=write(tmp_path, REHEARSAL))["harvest"]
    assert "vLLM was not measured: no vllm" in unmeasured["throughput_source"]
    doc = copy.deepcopy(REHEARSAL)
    doc["vllm"] = {"measured": True, "generation": {"tokens_per_s": 3500.0}, "prompt_logprobs": {"tokens_per_s": 1e4}}
    harvest = rows_by_key(c, rehearsal=write(tmp_path, doc))["harvest"]
    assert harvest["hours_high"] == pytest.approx(harvest["tokens_upper"] / 3500.0 / 3600)
    assert harvest["throughput_source"].endswith("vllm.generation")


def _without(dotted):
    doc = copy.deepcopy(REHEARSAL)
    *parents, leaf = dotted.split(".")
    node = doc
    for key in parents:
        node = node[key]
    del node[leaf]
    return doc


@pytest.mark.parametrize("doc, named", [
    (_without("merge.seconds"), "'merge.seconds' is missing"),
    (_without("scoring.16000.tokens_per_s"), "'scoring.16000.tokens_per_s' is missing"),
    (_without("training"), "'training.tokens_per_s' is missing"),
    (_without("vllm.measured"), "'vllm.measured' is missing"),
    ({**REHEARSAL, "vllm": {"measured": True, "generation": {"tokens_per_s": 1.0}}},
     "'vllm.prompt_logprobs.tokens_per_s' is missing"),
    ({**REHEARSAL, "merge": {"seconds": "fast"}}, "'merge.seconds' is 'fast'"),
    ({**REHEARSAL, "format": "something-else/2"}, "field 'format' is 'something-else/2'"),
])
def test_a_malformed_rehearsal_is_refused_naming_the_field(tmp_path, capsys, doc, named):
    path = write(tmp_path, doc)
    with pytest.raises(PlanError, match=named):
        plan(load_config("smoke"), rehearsal=path)
    assert main(["plan", "--profile", "smoke", "--store", str(tmp_path / "store"), "--rehearsal", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and named in err and not (tmp_path / "store").exists()


def test_the_plan_section_is_outside_the_digest_and_plan_needs_it(tmp_path, capsys):
    smoke = load_config("smoke")
    moved = load_config(path=variant_config(tmp_path, lambda r: r["plan"]["merge_seconds"].update(high=99.0)))
    assert moved.plan.merge_seconds.high == 99.0 and moved.digest == smoke.digest
    bare = variant_config(tmp_path, lambda r: r.pop("plan"))
    assert load_config(path=bare).digest == smoke.digest
    with pytest.raises(ConfigError, match="no plan section"):
        plan(load_config(path=bare))
    crossed = variant_config(tmp_path, lambda r: r["plan"]["generation_tokens_per_s"].update(low=9e9))
    with pytest.raises(ConfigError, match=r"plan\.generation_tokens_per_s: low \(9000000000\.0\) must not exceed high"):
        load_config(path=crossed)


def test_a_shipped_or_cached_model_is_priced_as_a_copy_not_a_build(tmp_path, monkeypatch):
    """The smoke model ships built: the plan's build row is done (a verified copy) and costs nothing
    of the remaining total; with the cache off, or a profile whose key nothing holds, it is a build."""
    c = load_config("smoke")
    monkeypatch.setenv("APSFT_MODEL_CACHE", str(tmp_path / "empty_cache"))
    shipped = rows_by_key(c)["model_build"]
    assert shipped["done"] == 1.0 and shipped["counts"] == "shipped"
    assert shipped["notes"] == ["no build: the shipped model, copied and verified"]
    monkeypatch.setenv("APSFT_MODEL_CACHE", "off")
    built = rows_by_key(c)["model_build"]
    assert built["done"] == 0.0 and built["counts"] != "shipped" and built["hours_high"] == shipped["hours_high"]
    monkeypatch.setenv("APSFT_MODEL_CACHE", str(tmp_path / "empty_cache"))
    other = c.model_copy(update={"embedded": c.embedded.model_copy(update={"train_steps": 7})})
    assert rows_by_key(other)["model_build"]["done"] == 0.0  # a key no entry has
