"""The one bank reader (core/bank.py `stored_tasks`, `read_shards`) on hand-made shards: the tasks'
order, the columns asked for, a typed empty frame, and the refusals that name the shard."""

from __future__ import annotations

import polars as pl
import pytest

from apsft_dagster.core.bank import read_shards, stored_tasks
from apsft_dagster.core.errors import HashMismatchError, MissingArtifactError
from apsft_dagster.core.layout import TRACE_BANK, shard_file
from apsft_dagster.core.store import Store

SCHEMA = {"task_id": pl.String, "trace_id": pl.String, "n_tokens": pl.Int64}


@pytest.fixture
def store(tmp_path) -> Store:
    """Shards for tasks a (two traces) and b (one); none for c."""
    store = Store(tmp_path / "store")
    store.put_parquet(shard_file(TRACE_BANK, "a"), pl.DataFrame(
        {"task_id": ["a", "a"], "trace_id": ["a-0", "a-1"], "n_tokens": [3, 5]}, schema=SCHEMA))
    store.put_parquet(shard_file(TRACE_BANK, "b"), pl.DataFrame(
        {"task_id": ["b"], "trace_id": ["b-0"], "n_tokens": [7]}, schema=SCHEMA))
    return store


def test_stored_tasks_keep_the_order_given_and_drop_the_absent(store):
    assert stored_tasks(store, TRACE_BANK, ["c", "b", "a"]) == ["b", "a"]
    assert stored_tasks(store, TRACE_BANK, iter(["a", "c"])) == ["a"]


def test_shards_are_read_in_the_tasks_order_with_the_columns_asked_for(store):
    frame = read_shards(store, TRACE_BANK, ["b", "a"], ["trace_id", "n_tokens"])
    assert frame.columns == ["trace_id", "n_tokens"]
    assert frame.rows() == [("b-0", 7), ("a-0", 3), ("a-1", 5)]
    assert read_shards(store, TRACE_BANK, ["a"])["task_id"].to_list() == ["a", "a"]  # every column by default


def test_a_schema_leads_so_no_task_gives_a_typed_empty_frame(store):
    empty = read_shards(store, TRACE_BANK, [], schema={"trace_id": pl.String, "n_tokens": pl.Int64})
    assert empty.height == 0 and dict(empty.schema) == {"trace_id": pl.String, "n_tokens": pl.Int64}
    frame = read_shards(store, TRACE_BANK, ["a"], schema={"n_tokens": pl.Int64})  # the schema's columns only
    assert frame.columns == ["n_tokens"] and frame["n_tokens"].to_list() == [3, 5]


def test_a_missing_or_changed_shard_is_refused_naming_it(store):
    with pytest.raises(MissingArtifactError, match="c.parquet"):
        read_shards(store, TRACE_BANK, ["a", "c"], ["trace_id"])
    path = store.path(shard_file(TRACE_BANK, "b"))
    pl.DataFrame({"task_id": ["b"], "trace_id": ["b-9"], "n_tokens": [7]}, schema=SCHEMA).write_parquet(path)
    with pytest.raises(HashMismatchError, match="b.parquet"):
        read_shards(store, TRACE_BANK, ["a", "b"], ["trace_id"])
