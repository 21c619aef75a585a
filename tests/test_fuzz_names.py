"""Names from the command line, fuzzed: dataset and run names (`apsft loss-mask add NAME`,
`apsft rl-report add NAME`) and partition keys (`apsft run --partitions JOB=KEY`). A name is
accepted exactly when the documented rule (re-implemented here) allows it; a refusal names the
value, exits 2 and writes nothing."""

import contextlib
import io
import os
import string
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apsft_dagster.cli import main
from apsft_dagster.cli.experiment.run import _partition_keys
from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.names import check_name
from apsft_dagster.experiment.stages import STAGES
from apsft_dagster.runner import check_partition_keys
from fuzzing import fuzz_settings, record

ALLOWED = set(string.ascii_letters + string.digits + "._-")
NAMES = st.one_of(st.text(max_size=70), st.text(alphabet=sorted(ALLOWED) + ["/", " ", "é", "\x00"], max_size=70),
                  st.sampled_from(["..", "a..b", "-a", ".hidden", "a" * 64, "a" * 65, "run_1", "../etc"]))


def _known(stage) -> list[str]:
    """A stage's keys by its own list: a static set's partitions, a dynamic set's known keys."""
    import dagster as dg

    if isinstance(stage.partitions_def, dg.DynamicPartitionsDefinition):
        return list(stage.known_keys or ())
    return stage.partitions_def.get_partition_keys()


PARTITIONED = {s.job: s for s in STAGES if s.partitions_def is not None and _known(s)}


def allowed(name: str) -> bool:
    """The rule as documented: 1-64 of letters, digits, '.', '_', '-', starting with a letter or
    digit, never '..'."""
    return (0 < len(name) <= 64 and set(name) <= ALLOWED and name[0] not in "._-" and ".." not in name)


@contextlib.contextmanager
def _isolated():
    with tempfile.TemporaryDirectory() as tmp:
        saved = {k: os.environ.get(k) for k in ("APSFT_STATE_DIR", "DAGSTER_HOME")}
        os.environ.update(APSFT_STATE_DIR=f"{tmp}/state", DAGSTER_HOME=f"{tmp}/dagster")
        try:
            yield Path(tmp)
        finally:
            for key, value in saved.items():
                os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)


def _main(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        return main(argv), err.getvalue()


@fuzz_settings(200)
@given(name=NAMES)
def test_a_name_is_accepted_exactly_when_the_rule_allows_it(name):
    try:
        assert check_name(name, "dataset") == name
    except ApsftError as exc:
        assert repr(name) in str(exc) and not allowed(name)
        record("names", "refused: ApsftError")
    else:
        assert allowed(name), f"{name!r} was accepted"
        record("names", "accepted")


@fuzz_settings(12)
@given(name=NAMES.filter(lambda n: not allowed(n) and n and not n.startswith("-") and "\x00" not in n))
@pytest.mark.parametrize("command", ["loss-mask", "rl-report"])
def test_a_refused_name_on_the_command_line_exits_2_and_writes_nothing(command, name):
    with _isolated() as tmp:
        (tmp / "rows.jsonl").write_text("{}\n")
        rc, said = _main([command, "add", name, str(tmp / "rows.jsonl"), "--store", str(tmp / "store")])
        assert rc == 2 and repr(name) in said, said
        assert sorted(p.name for p in tmp.iterdir()) == ["rows.jsonl"]
        record("names (command line)", "refused: exit 2")


@st.composite
def partition_specs(draw) -> str:
    job = draw(st.sampled_from(sorted(PARTITIONED)) | st.text(max_size=12))
    known = _known(PARTITIONED[job]) if job in PARTITIONED else ["x"]
    keys = draw(st.lists(st.sampled_from(known) | st.text(max_size=12), max_size=3))
    return f"{job}{draw(st.sampled_from(['=', '', '==']))}{','.join(keys)}"


@fuzz_settings(150)
@given(spec=partition_specs())
def test_partition_keys_by_hand_are_the_stages_own_or_refused_by_name(spec):
    try:
        keys = _partition_keys([spec], set(PARTITIONED))
        check_partition_keys(list(PARTITIONED.values()), keys)
    except ValueError as exc:
        assert repr(spec) in str(exc) or any(repr(k) in str(exc) for k in spec.partition("=")[2].split(",")), str(exc)
        record("partition keys", "refused: ValueError")
        return
    for job, wanted in keys.items():  # accepted: every key is a partition of that job, by the job's own list
        assert set(wanted) <= set(_known(PARTITIONED[job]))
    record("partition keys", "accepted")


def test_a_refused_partition_key_on_the_command_line_exits_2_and_writes_nothing():
    with _isolated() as tmp:
        rc, said = _main(["run", "--store", str(tmp / "store"), "--partitions", "trace_bank_job=nope/../x"])
        assert rc == 2 and "'nope/../x'" in said, said
        assert list(tmp.iterdir()) == []
