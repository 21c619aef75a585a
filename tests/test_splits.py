import polars as pl
import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.tasks.catalog import (
    build_catalog,
    check_answer_not_in_prompt,
    check_cell_counts,
    check_firewall,
    train_task_ids,
)
from apsft_dagster.core.tasks.splits import render_second


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    model = tmp_path_factory.mktemp("model")
    (model / "config.json").write_text("{}")
    mp = pytest.MonkeyPatch()
    mp.setenv("APSFT_MODEL_DIR", str(model))
    yield load_config("full")
    mp.undo()


def test_full_catalog_has_the_registered_splits(full):
    catalog = build_catalog(full)
    counts = dict(catalog.group_by("split").len().iter_rows())
    assert counts == {"train": 360, "core_iid": 180, "core_hard": 60, "held_family": 60, "rendering": 180}
    cells = catalog.group_by("split", "family", "level").len()
    assert set(cells.filter(pl.col("split") == "train")["len"]) == {40}
    assert set(cells.filter(pl.col("split") == "held_family")["family"]) == {"brinework", "spindle"}
    assert set(catalog.filter(pl.col("split") == "core_hard")["level"]) == {4}
    assert check_cell_counts(catalog, full) == check_firewall(catalog) == check_answer_not_in_prompt(catalog) == []


def test_train_is_the_first_per_cell_indices_and_eval_uses_its_own_seed_space(full):
    catalog = build_catalog(full)
    train = catalog.filter(pl.col("split") == "train")
    assert sorted(set(train["index"])) == list(range(40))
    assert set(train["seed"]) == {full.seeds.train_tasks}
    assert set(catalog.filter(pl.col("split") != "train")["seed"]) == {full.seeds.eval_tasks}
    held = catalog.filter(pl.col("split") == "held_family")
    assert sorted(set(held["index"])) == list(range(10))


def test_task_ids_sort_by_family_then_level_then_index(full):
    ids = train_task_ids(full)
    assert ids[0] == "caravan-L1-000" and ids[39] == "caravan-L1-039" and ids[40] == "caravan-L2-000"
    assert ids[-1] == "runeward-L3-039" and ids == sorted(ids)


def test_checks_catch_a_broken_catalog():
    config = load_config("smoke")
    catalog = build_catalog(config)
    train_prompt = catalog.filter(pl.col("split") == "train")["prompt"][0]
    leaky = catalog.with_columns(
        pl.when(pl.col("task_id") == "core_iid-caravan-L1-000").then(pl.lit(train_prompt))
        .when(pl.col("task_id") == "runeward-L2-001").then(pl.col("prompt") + "\nANSWER: 3")
        .otherwise(pl.col("prompt")).alias("prompt"))
    assert check_firewall(leaky) == ["core_iid-caravan-L1-000: eval prompt equals a train prompt"]
    assert check_answer_not_in_prompt(leaky) == ["runeward-L2-001: prompt contains 'ANSWER:'"]
    short = catalog.filter(pl.col("task_id") != "held_family-spindle-L2-000")
    assert check_cell_counts(short, config) == ["(held_family, spindle, L2): 3 tasks, expected 4"]
    extra = pl.concat([catalog,
                       catalog.filter(pl.col("split") == "train").head(1).with_columns(level=pl.lit(4, pl.Int64))])
    assert check_cell_counts(extra, config)[-1].endswith("1 tasks in a cell the config does not declare")


def test_rendering_is_core_iid_under_a_second_template(full):
    catalog = build_catalog(full)
    iid = catalog.filter(pl.col("split") == "core_iid").sort("task_id")
    rendering = catalog.filter(pl.col("split") == "rendering").sort("task_id")
    assert rendering["task_id"].to_list() == [t.replace("core_iid-", "rendering-") for t in iid["task_id"]]
    for column in ("family", "level", "index", "seed", "answer", "solution"):
        assert rendering[column].to_list() == iid[column].to_list(), column
    # the same task text inside another frame: every prompt differs, and contains its core-IID text
    assert all(r != i and i in r for r, i in zip(rendering["prompt"], iid["prompt"]))
    assert rendering["prompt"].to_list() == [render_second(p) for p in iid["prompt"]]
    dropped = catalog.filter(pl.col("task_id") != "rendering-caravan-L1-000")
    assert check_cell_counts(dropped, full) == ["(rendering, caravan, L1): 19 tasks, expected 20"]
