"""Tasks from a file (core/task_file/, docs/task-files.md): the builders' tasks written out and read back give
their catalog byte for byte; checkers judge hand-made answers; bad files are refused by file, row and field."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import polars as pl
import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ConfigError, TaskFileError
from apsft_dagster.core.evaluation.parse import parse_one
from apsft_dagster.core.layout import TASK_CATALOG
from apsft_dagster.core.seeds import seed64
from apsft_dagster.core.stage_b import vote_correct
from apsft_dagster.core.store import parquet_bytes
from apsft_dagster.core.task_file.checkers import checker
from apsft_dagster.core.task_file.export import export_tasks, task_rows
from apsft_dagster.core.task_file.source import answer_checks, task_catalog, train_task_ids
from apsft_dagster.core.tasks.catalog import build_catalog, check_cell_counts, check_firewall
from apsft_dagster.core.tasks.catalog import train_task_ids as builders_train_ids
from apsft_dagster.core.training.probe import probe_prompts

SMOKE = load_config("smoke")
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "task_file" / "smoke_taskfile.yaml"
ROWS = task_rows(SMOKE).to_dicts()  # the builders' tasks as file rows (configured splits only)


def profile(folder: Path, rows: list[dict] | bytes, name: str = "tasks.jsonl", **tasks) -> Path:
    """A profile extending smoke that reads `rows` from a task file beside it."""
    data = rows if isinstance(rows, bytes) else "".join(json.dumps(r) + "\n" for r in rows).encode()
    (folder / name).write_bytes(data)
    pinned = {"source": name, "source_sha256": hashlib.sha256(data).hexdigest(), **tasks}
    path = folder / "p.yaml"
    path.write_text(f"extends: smoke\nprofile: filed\ntasks: {json.dumps(pinned)}\n")
    return path


def refused(folder: Path, rows: list[dict] | bytes, match: str, name: str = "tasks.jsonl") -> None:
    """Loading the profile and its catalog is refused with `match`, and nothing new is written."""
    path = profile(folder, rows, name)
    before = sorted(folder.iterdir())
    with pytest.raises(TaskFileError, match=match):
        task_catalog(load_config(path=path))
    assert sorted(folder.iterdir()) == before


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_the_builders_written_to_a_file_and_read_back_give_their_catalog(tmp_path, suffix):
    out = tmp_path / f"tasks{suffix}"
    n, digest = export_tasks(SMOKE, out)
    assert n == 90 and digest == hashlib.sha256(out.read_bytes()).hexdigest()  # 18 + 36 + 12 + 24, no rendering
    path = tmp_path / "p.yaml"
    path.write_text(f"extends: smoke\nprofile: filed\ntasks: {{source: {out.name}, source_sha256: {digest}}}\n")
    filed = load_config(path=path)
    catalog = task_catalog(filed)
    assert parquet_bytes(catalog) == parquet_bytes(build_catalog(SMOKE))  # every column, rendering included
    assert train_task_ids(filed) == builders_train_ids(SMOKE)
    assert filed.digest != SMOKE.digest and filed.digest_body["tasks"]["source_sha256"] == digest
    assert "source" not in SMOKE.digest_body["tasks"] and SMOKE.digest.startswith("313ee1a8bc18")
    checks = answer_checks(filed)
    assert answer_checks(SMOKE) is None and set(checks) == set(catalog["task_id"])
    for row in catalog.head(12).iter_rows(named=True):  # exact: the builders' comparison
        assert checks[row["task_id"]](row["answer"]) and not checks[row["task_id"]](row["answer"] + "0")


def test_export_tasks_writes_the_file_and_prints_the_lines_that_pin_it(tmp_path, capsys):
    from apsft_dagster.cli import main

    out = tmp_path / "smoke.parquet"
    assert main(["export-tasks", "--profile", "smoke", "--out", str(out)]) == 0
    said = capsys.readouterr().out
    assert f"source_sha256: {hashlib.sha256(out.read_bytes()).hexdigest()}" in said and "wrote 90 tasks" in said
    assert pl.read_parquet(out).columns == ["id", "split", "family", "level", "index", "seed", "prompt", "answer",
                                            "solution"]


def test_the_shipped_example_is_smoke_s_catalog_byte_for_byte():
    example = load_config(path=EXAMPLE)
    assert parquet_bytes(task_catalog(example)) == parquet_bytes(build_catalog(SMOKE))
    assert example.tasks.model_dump(exclude={"source", "source_sha256"}) == SMOKE.tasks.model_dump(
        exclude={"source", "source_sha256"})


def test_the_example_s_catalog_is_the_smoke_run_s_artifact(cli_run):
    """The task_catalog artifact a run from examples/task_file/ writes is README command 1's, byte for byte
    (the whole run from the file: benchmarks/task_file_receipts.py)."""
    _, store, _ = cli_run
    assert parquet_bytes(task_catalog(load_config(path=EXAMPLE))) == store.get_bytes(TASK_CATALOG)


def test_checkers_judge_hand_made_answers(tmp_path, monkeypatch):
    assert checker("exact")("7", " 007. ") and not checker("exact")("70", "7")
    assert checker("exact")("3:4", "03:4") and checker("exact")("AEK", "aek")
    assert checker("numeric:0.01")("3.14", "3.14159") and not checker("numeric:0.001")("3.14", "3.14159")
    assert checker("numeric")("1,000", "1000") and not checker("numeric")("ABC", "1000")
    assert checker("regex:(42|FORTY-?TWO)")("FORTYTWO", "42") and not checker("regex:(42|FORTY-?TWO)")("420", "42")
    (tmp_path / "mychecks.py").write_text("def parity(parsed, answer):\n"
                                          "    return int(parsed) % 2 == int(answer) % 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert checker("mychecks:parity")("9", "1") and not checker("mychecks:parity")("8", "1")
    for bad, said in (("numeric:-1", "tolerance"), ("regex:(", "not a regular"), ("nomodule_x:f", "cannot import"),
                      ("fuzzy", "no checker")):
        with pytest.raises(ValueError, match=said):
            checker(bad)


def test_a_file_s_checkers_reach_the_evaluation_the_rollouts_and_the_votes(tmp_path):
    rows = [{**r, "answer": r["answer"] + ".0", "checker": "numeric:0.5"} if r["family"] == "caravan" else r
            for r in ROWS]
    checks = answer_checks(load_config(path=profile(tmp_path, rows)))
    tid = "core_iid-caravan-L1-000"
    answer = float(build_catalog(SMOKE).filter(pl.col("task_id") == tid)["answer"][0])
    assert checks[tid](str(answer + 0.4)) and not checks[tid](str(answer + 0.6))
    assert checks["rendering-caravan-L1-000"](str(answer))  # a derived task keeps its source row's checker

    class Tokenizer:
        def decode(self, ids, skip_special_tokens):
            return f"thought</think>\n\nANSWER: {answer + 0.25}<|im_end|>"
    parsed = parse_one([1, 7, 2], Tokenizer(), 7, "unused", SMOKE.harvest.loop, checks[tid])
    assert parsed["answer"] == str(answer + 0.25) and parsed["correct"]
    assert not parse_one([1, 7, 2], Tokenizer(), 7, str(answer), SMOKE.harvest.loop)["correct"]  # exact: wrong
    samples = pl.DataFrame({"answer": ["5", "5.2", None], "correct": [False, True, False]})
    assert vote_correct("5.2", samples) and not vote_correct("5", samples) and not vote_correct(None, samples)


def test_a_checker_that_raises_while_judging_is_refused_by_task(tmp_path, monkeypatch):
    (tmp_path / "fragile.py").write_text("def check(parsed, answer):\n    return int(parsed) == int(answer)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    rows = [{**r, "checker": "fragile:check"} if r["family"] == "caravan" else r for r in ROWS]
    checks = answer_checks(load_config(path=profile(tmp_path, rows)))
    with pytest.raises(TaskFileError, match="task caravan-L1-000: checker 'fragile:check' raised ValueError"):
        checks["caravan-L1-000"]("SEVEN")


def test_the_split_rule_places_rows_by_a_seeded_order_of_their_ids(tmp_path):
    rows = [{**{k: v for k, v in r.items() if k != "split"}, "id": f"pool-{r['id']}"}
            if r["split"] in ("train", "core_iid") else r for r in ROWS]  # 6 per cell: 2 to train, 4 to core IID
    catalog = task_catalog(load_config(path=profile(tmp_path, rows)))
    cell = [r["id"] for r in rows if (r["family"], r["level"]) == ("runeward", 2) and "split" not in r]
    expected = sorted(sorted(cell, key=lambda t: seed64("apsft-split", 1001, t))[:2])  # train.per_cell 2
    got = catalog.filter((pl.col("split") == "train") & (pl.col("family") == "runeward") & (pl.col("level") == 2))
    assert got["task_id"].to_list() == expected
    assert catalog.group_by("split").len().sort("split").rows() == build_catalog(SMOKE).group_by(
        "split").len().sort("split").rows()


def test_bad_files_are_refused_by_file_row_and_field(tmp_path):
    good = "".join(json.dumps(r) + "\n" for r in ROWS)
    refused(tmp_path, (good + "{not json\n").encode(), r"tasks.jsonl: row 91: not valid JSON")
    refused(tmp_path, [*ROWS[:3], {**ROWS[3], "level": "1"}], r"row 4: field 'level': '1' is not a non-empty int")
    refused(tmp_path, [{k: v for k, v in ROWS[0].items() if k != "prompt"}], r"row 1: field 'prompt': missing")
    refused(tmp_path, [{**ROWS[0], "difficulty": 3}], r"row 1: field 'difficulty': unknown column")
    refused(tmp_path, [*ROWS, {**ROWS[5], "prompt": "another"}], rf"row 91: field 'id': '{ROWS[5]['id']}' is also "
                                                                  "row 6's id")
    refused(tmp_path, [r for r in ROWS if r["id"] != "caravan-L2-001"],
            r"cell \(train, caravan, L2\) holds 1 tasks but tasks.train.per_cell is 2")
    brine = next(i for i, r in enumerate(ROWS) if r["family"] == "brinework")  # a ratio: no number
    refused(tmp_path, [{**r, "checker": "numeric"} if i == brine else r for i, r in enumerate(ROWS)],
            rf"row {brine + 1}: field 'checker': 'numeric' raised ValueError")
    refused(tmp_path, [{**ROWS[0], "checker": "regex:[A-Z]+"}, *ROWS[1:]], r"row 1: field 'answer': .* judged wrong")
    refused(tmp_path, [{**ROWS[0], "split": "rendering"}], r"row 1: field 'split': 'rendering' .* derived from "
                                                           "core_iid")
    refused(tmp_path, [{**ROWS[0], "family": "spindle"}, *ROWS[1:]], r"row 1: field 'family' or 'level'")
    refused(tmp_path, b"id,prompt\n", "a task file is .jsonl or .parquet", name="tasks.csv")


def test_a_changed_or_unpinned_file_is_refused_on_load(tmp_path):
    path = profile(tmp_path, ROWS)
    (tmp_path / "tasks.jsonl").write_bytes(b"\n" + (tmp_path / "tasks.jsonl").read_bytes())
    with pytest.raises(ConfigError, match="tasks.source_sha256: .* has SHA-256 .*, the profile pins"):
        load_config(path=path)
    path.write_text("extends: smoke\ntasks: {source: tasks.jsonl}\n")
    with pytest.raises(ConfigError, match="tasks.source and tasks.source_sha256 go together"):
        load_config(path=path)
    with pytest.raises(TaskFileError, match="a task file is .jsonl or .parquet"):
        export_tasks(SMOKE, tmp_path / "out.csv")
    assert not (tmp_path / "out.csv").exists()


# A file's own families (docs/task-files.md, "Families of your own"): GSM8K-like word problems and a held-out
# family the builders do not know, with numeric and exact checkers, three probe rows and a spare train row.
def own(id_, prompt, answer, family, level, split, checker="numeric"):
    return {"id": id_, "prompt": prompt, "answer": answer, "family": family, "level": level, "split": split,
            "checker": checker}


GSM = [own("g1-train", "Ann has 3 apples and buys 4 more. How many apples does she have?", "7", "gsm_like", 1, "train"),
       own("g1-train-spare", "Dan has 2 kites and makes 7 more. How many kites has he?", "9", "gsm_like", 1, "train"),
       own("g2-train", "A pack holds 6 cans. Ben buys 2 packs and drinks 5 cans. How many are left?", "7", "gsm_like",
           2, "train"),
       own("g1-iid", "Cara has 10 coins and loses 4. How many coins are left?", "6", "gsm_like", 1, "core_iid"),
       own("g2-iid", "Each of 3 boxes holds 5 pens, and 2 pens break. How many pens still work?", "13", "gsm_like", 2,
           "core_iid"),
       own("g3-hard", "A bus has 40 seats. 25 people board, 8 leave, then 12 board. How many seats are empty?", "11",
           "gsm_like", 3, "core_hard"),
       own("u1-held", "How many grams are there in 1.5 kilograms?", "1500", "unit_convert", 1, "held_family", "exact"),
       own("p-c", "A cat has 4 legs. How many legs do 3 cats have?", "12", "gsm_like", 1, "probe"),
       own("p-a", "Eve has 8 shells and finds 5 more. How many shells has she?", "13", "gsm_like", 1, "probe"),
       own("p-b", "Four kids share 20 grapes, then each eats 2. How many grapes are left?", "12", "gsm_like", 2,
           "probe")]
OWN_SPLITS = {"train": {"families": ["gsm_like"], "levels": [1, 2], "per_cell": 1, "total": 2},
              "core_iid": {"families": ["gsm_like"], "levels": [1, 2], "per_cell": 1, "total": 2},
              "core_hard": {"families": ["gsm_like"], "levels": [3], "per_cell": 1, "total": 1},
              "held_family": {"families": ["unit_convert"], "levels": [1], "per_cell": 1, "total": 1}}
LOCAL = {"source": "local", "name": "lab/model", "path": "models/lab-snapshot", "architecture": None}
NEW_EXAMPLE = EXAMPLE.with_name("gsm_like.yaml")


def own_profile(folder: Path, rows: list[dict], model: dict | None = LOCAL, splits: dict = OWN_SPLITS,
                probe: int = 2) -> Path:
    """A profile extending smoke (JSON is YAML) reading `rows`; `model` None keeps smoke's embedded model."""
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    (folder / "own.jsonl").write_bytes(data)
    body = {"extends": "smoke", "profile": "own", "probe": {"prompts": probe},
            "tasks": {"source": "own.jsonl", "source_sha256": hashlib.sha256(data).hexdigest(), **splits},
            **({"model": model, "embedded": None} if model else {})}
    (folder / "own.yaml").write_text(json.dumps(body))
    return folder / "own.yaml"


def test_a_file_s_own_families_load_into_the_catalog_worked_out_by_hand(tmp_path):
    config = load_config(path=own_profile(tmp_path, GSM), require_snapshot=False)
    catalog = task_catalog(config)
    assert catalog.select("task_id", "split", "family", "level", "index", "answer").rows() == [
        ("g3-hard", "core_hard", "gsm_like", 3, 0, "11"),
        ("g1-iid", "core_iid", "gsm_like", 1, 0, "6"), ("g2-iid", "core_iid", "gsm_like", 2, 0, "13"),
        ("u1-held", "held_family", "unit_convert", 1, 0, "1500"),
        ("rendering-g1-iid", "rendering", "gsm_like", 1, 0, "6"), ("rendering-g2-iid", "rendering", "gsm_like", 2, 0,
                                                                   "13"),
        ("g1-train", "train", "gsm_like", 1, 0, "7"), ("g2-train", "train", "gsm_like", 2, 0, "7")]  # the spare: out
    prompts = dict(zip(catalog["task_id"], catalog["prompt"]))
    assert prompts["rendering-g1-iid"] == ("Here is a puzzle. Read all of it before you start.\n\nCara has 10 coins "
                                           "and loses 4. How many coins are left?\n\nWork it out step by step and "
                                           "finish with the final value.")
    assert check_cell_counts(catalog, config) == [] and check_firewall(catalog) == []
    assert train_task_ids(config) == ["g1-train", "g2-train"]
    checks = answer_checks(config)
    assert set(checks) == set(catalog["task_id"])
    assert checks["g2-iid"]("13.0") and checks["rendering-g2-iid"]("13") and not checks["g2-iid"]("12")  # numeric
    assert checks["u1-held"]("1500") and not checks["u1-held"]("1500.0")  # exact
    assert probe_prompts(config, set(catalog["prompt"])) == [GSM[8]["prompt"], GSM[9]["prompt"]]  # p-a, p-b
    exported = tmp_path / "again.jsonl"  # written out, the probe rows it took come along
    export_tasks(config, exported)
    again = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [r["id"] for r in again] == [*catalog.filter(pl.col("split") != "rendering")["task_id"], "p-a", "p-b"]
    assert {r["id"]: r["checker"] for r in again}["u1-held"] == "exact"


def test_a_file_s_families_need_a_source_an_identifier_and_a_local_model(tmp_path):
    path = tmp_path / "p.yaml"
    for key, value, said in (("families", ["gsm_like"], "tasks.train.families.0: Input should be 'caravan', "
                              "'foundry_ledger', 'runeward', 'brinework' or 'spindle' (got 'gsm_like')"),
                             ("levels", [7], "tasks.train.levels.0: Input should be 1, 2, 3 or 4 (got 7)")):
        path.write_text(f"extends: smoke\ntasks: {{train: {{{key}: {value}}}}}\n")  # no source: the builders'
        with pytest.raises(ConfigError) as refusal:
            load_config(path=path)
        assert said in str(refusal.value)
    for key, value, said in (("families", ["GSM-like"], "family names"), ("levels", [0], "levels (integers >= 1)")):
        splits = {**OWN_SPLITS, "train": {**OWN_SPLITS["train"], key: value}}
        with pytest.raises(ConfigError, match=rf"tasks.train.{key}: with tasks.source, a list .*{re.escape(said)}"):
            load_config(path=own_profile(tmp_path, GSM, splits=splits), require_snapshot=False)
    with pytest.raises(ConfigError, match=r"model.source: the embedded model pretrains .* tasks.train names "
                                          r"\['gsm_like'\], which only the task file holds; set model.source: local"):
        load_config(path=own_profile(tmp_path, GSM, model=None))
    nine = {**OWN_SPLITS, **{s: {**OWN_SPLITS[s], "levels": [1, 9]} for s in ("train", "core_iid")}}
    with pytest.raises(ConfigError, match=r"tasks.train names \['gsm_like', 'L9'\]"):  # L1 is the builders'
        load_config(path=own_profile(tmp_path, GSM, model=None, splits=nine))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["own.jsonl", "own.yaml", "p.yaml"]


def test_a_held_out_family_of_a_file_keeps_the_embedded_model_and_the_builders_probe(tmp_path):
    held = [own(f"u1-{i}", f"How many grams are there in {i} kilograms?", f"{i}000", "unit_convert", 1,
                "held_family") for i in range(1, 4)]
    splits = {**SMOKE.tasks.model_dump(exclude={"source", "source_sha256"}),
              "held_family": {"families": ["unit_convert"], "levels": [1], "per_cell": 3, "total": 3}}
    rows = [r for r in ROWS if r["split"] != "held_family"] + held
    config = load_config(path=own_profile(tmp_path, rows, model=None, splits=splits, probe=8))
    catalog = task_catalog(config)
    assert catalog.filter(pl.col("split") == "held_family")["task_id"].to_list() == ["u1-1", "u1-2", "u1-3"]
    assert probe_prompts(config, set(catalog["prompt"])) == probe_prompts(SMOKE, set(build_catalog(SMOKE)["prompt"]))


def test_the_probe_rows_of_a_file_are_refused_when_too_few_or_off_the_train_cells(tmp_path):
    one_probe = [r for r in GSM if r["id"] not in ("p-a", "p-b")]
    for rows, said in ((one_probe, r"the deployment probe needs probe.prompts = 2 prompts and the file holds 1 rows "
                                   r"with split 'probe' \(tasks.train names \['gsm_like'\]"),
                       ([*GSM[:8], {**GSM[8], "prompt": GSM[3]["prompt"]}, GSM[9]],
                        r"row 9: field 'prompt': the same as task g1-iid's prompt"),
                       ([*GSM[:9], {**GSM[9], "level": 3}], r"row 10: field 'family' or 'level': a probe row is a "
                                                            r"prompt of a train cell, and \(gsm_like, L3\) is none")):
        with pytest.raises(TaskFileError, match=said):
            task_catalog(load_config(path=own_profile(tmp_path, rows), require_snapshot=False))


def test_the_shipped_example_of_a_new_family_validates_without_its_snapshot():
    config = load_config(path=NEW_EXAMPLE, require_snapshot=False)
    catalog = task_catalog(config)
    assert dict(catalog.group_by("split").len().rows()) == {"train": 4, "core_iid": 4, "core_hard": 2,
                                                            "held_family": 2, "rendering": 4}
    assert set(catalog["family"]) == {"gsm_like", "unit_convert"} and config.model.source == "local"
    assert len(probe_prompts(config, set(catalog["prompt"]))) == config.probe.prompts == 3
    with pytest.raises(ConfigError, match="model.path: .* is not a model directory"):
        load_config(path=NEW_EXAMPLE)  # the path is yours to fill
