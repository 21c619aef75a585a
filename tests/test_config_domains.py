"""Every profile field's domain, drawn from the config model itself (core/domains.py): a value
outside is refused by `apsft validate`, naming the field, with nothing written; a value inside
validates. A field added to the model is covered here without a new line of test."""

import contextlib
import copy
import fnmatch
import io
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apsft_dagster.cli import main
from apsft_dagster.core.config import load_config
from apsft_dagster.core.domains import Domain, _num, domain_table, domains
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.paths import CONFIG_DIR, PROJECT_ROOT

SMOKE = yaml.safe_load((CONFIG_DIR / "smoke.yaml").read_text())
DOMAINS = domains()
# Fields whose in-domain values can still break a rule across fields, with the refusal that rule gives.
LINKED = {
    "tasks.*.per_cell": r"total is \d+ but",
    "tasks.*.total": r"total is \d+ but",
    "tasks.*.families": r"total is \d+ but|must not share a family|must equal tasks\.train\.families|names one twice",
    "tasks.*.levels": r"total is \d+ but|names one twice",
    "training.throughput_tokens_per_s.*": r"must not exceed high",
    "plan.*": r"must not exceed high",
    "run_report.thresholds.phrase_m*_words": r"must not exceed phrase_max_words",
    "harvest.inherited_index*": r"go together",
    "tasks.source*": r"go together",
    "protocol.*": r"protocol: only for model\.source local",  # smoke's model is the embedded one
    "model.source": r"model\.path: required|model\.architecture: only for",
    "model.architecture": r"model\.architecture: required|embedded\.linear_attention and embedded\.vision: required",
    "compute.dtype": r"CPU runs in float32",
    "compute.quantization": r"nf4 needs compute\.device cuda",
    "stage_b.min_gain": r"stage_b\.min_gain: .* is below 0 .*only a declared rehearsal",
    "rehearsal": r"rehearsal: .*(no file|itself a rehearsal|no trigger threshold differs|may change only)",
}

def examples(n: int):
    """A bounded, reproducible draw per field (a fixed seed: CI sees the same values every run)."""
    return settings(max_examples=n, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])

WRONG_TYPES = st.one_of(st.text(max_size=6), st.booleans(), st.lists(st.integers(), max_size=2), st.none())


def inside(d: Domain) -> st.SearchStrategy:
    """Values the field's own checks accept."""
    if d.kind == "integer":
        low = int(d.low) + (1 if d.low_open else 0) if d.low is not None else -10**6
        high = int(d.high) - (1 if d.high_open else 0) if d.high is not None else low + 10**6
        base = st.integers(low, high)
    elif d.kind == "number":
        base = st.floats(d.low, d.high, exclude_min=d.low_open, exclude_max=d.high_open, allow_nan=False,
                         allow_infinity=False).map(lambda v: 0.0 if v == 0 else v)
    elif d.kind == "choice":
        base = st.sampled_from(d.choices)
    elif d.kind == "boolean":
        base = st.booleans()
    elif d.kind == "string":
        base = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)
    elif d.kind == "list":
        base = st.lists(inside(d.item), min_size=d.min_items, max_size=d.min_items + 3)
    else:
        base = st.dictionaries(st.text(min_size=1, max_size=6), st.lists(st.text(max_size=6), max_size=3), max_size=2)
    return (st.none() | base) if d.nullable else base


def outside(d: Domain) -> st.SearchStrategy:
    """Values the field's own checks refuse: past a bound, off the set, non-finite, or of another type."""
    options = [WRONG_TYPES]
    if d.kind in ("integer", "number") and d.low is not None:
        options.append(st.integers(max_value=int(d.low)) if d.kind == "integer" else st.floats(max_value=d.low))
    if d.kind in ("integer", "number") and d.high is not None:
        options.append(st.integers(min_value=int(d.high)) if d.kind == "integer" else st.floats(min_value=d.high))
    if d.kind == "number":
        options.append(st.sampled_from([float("inf"), float("-inf"), float("nan")]))
    if d.kind == "integer":
        options.append(st.floats(allow_nan=False, allow_infinity=False))
    if d.kind == "choice":
        options.append(st.text(max_size=8) | st.integers(-5, 99) | st.sampled_from([str(c) for c in d.choices]))
    if d.kind == "list":
        options.append(st.lists(outside(d.item), min_size=1, max_size=3) | st.just([]))
    return st.one_of(options).filter(lambda v: not d.contains(v))


@contextlib.contextmanager
def _written(field: str, value) -> Iterator[Path]:
    """A profile setting `field` to `value`, alone in a folder removed afterwards."""
    raw = copy.deepcopy(SMOKE)
    *parents, leaf = field.split(".")
    node = raw
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    with tempfile.TemporaryDirectory(prefix="domain-") as folder:
        path = Path(folder) / "profile.yaml"
        path.write_text(yaml.dump(raw, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper)))
        yield path


def _validate(path: Path) -> tuple[int, str]:
    """`apsft validate --config PATH` in this process, with its state and store pointed beside the profile."""
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in ("APSFT_STATE_DIR", "APSFT_STORE_DIR", "DAGSTER_HOME")}
    os.environ.update(APSFT_STATE_DIR=str(path.parent / "state"), APSFT_STORE_DIR=str(path.parent / "store"),
                      DAGSTER_HOME=str(path.parent / "dagster"))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(["validate", "--config", str(path)])
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    return rc, out.getvalue() + err.getvalue()


def _linked(field: str) -> str | None:
    return next((rule for pattern, rule in LINKED.items() if fnmatch.fnmatch(field, pattern)), None)


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: d.field)
@examples(5)
@given(data=st.data())
def test_a_value_outside_its_domain_is_refused_by_name_and_nothing_is_written(domain, data):
    value = data.draw(outside(domain), label=domain.field)
    with _written(domain.field, value) as path:
        rc, said = _validate(path)
        left = sorted(p.name for p in path.parent.iterdir())
    assert rc == 2, f"{domain.field} = {value!r} was accepted:\n{said}"
    assert re.search(rf"  {re.escape(domain.field)}(\.\d+)?: ", said), said
    if domain.kind in ("integer", "number") and isinstance(value, int | float) and not isinstance(value, bool) \
            and (domain.kind == "number" or isinstance(value, int)) and value == value and abs(value) != float("inf"):
        bound = domain.low if (domain.low is not None and value <= domain.low) else domain.high
        assert f"than {_num(bound)}" in said or f"to {_num(bound)}" in said, said  # the range is stated
    assert left == ["profile.yaml"]  # no state, store or Dagster home


@pytest.mark.parametrize("domain", DOMAINS, ids=lambda d: d.field)
@examples(2)
@given(data=st.data())
def test_a_value_inside_its_domain_validates(domain, data):
    value = data.draw(inside(domain), label=domain.field)
    try:
        with _written(domain.field, value) as path:
            load_config(path=path)
    except ConfigError as exc:
        rule = _linked(domain.field)  # refused by a rule across fields, never by this field's own range
        assert rule is not None and re.search(rule, str(exc)) and "Input should" not in str(exc), \
            f"{domain.field} = {value!r} was refused:\n{exc}"


def test_every_section_and_field_of_the_profiles_is_covered():
    """The walk reaches every key the shipped profiles set (a field it missed would go unchecked)."""
    fields = {d.field for d in DOMAINS}

    sections = {d.field.rsplit(".", i)[0] for d in DOMAINS for i in range(1, d.field.count(".") + 1)}

    def leaves(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict) and key != "target_modules":
                yield from leaves(value, f"{prefix}{key}.")
            elif not (value is None and f"{prefix}{key}" in sections):  # an optional section left out
                yield f"{prefix}{key}"

    for profile in ("smoke", "full", "smoke_vllm"):
        raw = yaml.safe_load((CONFIG_DIR / f"{profile}.yaml").read_text())
        raw.pop("extends", None)
        assert set(leaves(raw)) <= fields, profile
    assert len(fields) == len(DOMAINS) > 140


def test_the_protocol_shows_every_fields_domain_as_the_model_declares_it():
    text = (PROJECT_ROOT / "docs" / "PROTOCOL.md").read_text()
    assert domain_table() in text, "docs/PROTOCOL.md's domain table is stale: run scripts/domain_table.py"
    assert "| `harvest.samples_per_task` | integer >= 1 |" in text
    assert "| `evaluation.confidence` | finite number in (0, 1) |" in text
    assert "| `harvest.sampling.top_p` | finite number in (0, 1] |" in text


# Every command that takes a profile, with the other arguments it needs (a new command needs a line here).
COMMAND_LINES = {
    "run": [], "ui": [], "validate": [], "plan": [], "doctor": [], "export-bank": ["--out", "{dir}/bank"],
    "amend": ["a text"], "freeze": ["--rationale", "why"],
    "audit": [], "report": [], "loss-mask": ["add", "ds", "{dir}/rows.jsonl"], "rl-report": ["add", "r1", "{dir}"],
    "export-tasks": ["--out", "{dir}/tasks.jsonl"], "import-traces": ["{dir}/rows.jsonl"],
    "export-arms": ["--format", "messages", "--out", "{dir}/arms"],
}
NO_PROFILE = {"compare"}  # two stores, each read as its own seal records it
# a command's further actions, each refused the same way (command, its other arguments)
MORE_LINES = [("rl-report", ["filter", "r1"])]


def test_every_command_that_takes_a_profile_refuses_a_bad_one_before_writing(tmp_path, monkeypatch, capsys):
    from apsft_dagster.cli import parser

    commands = next(a for a in parser()._actions if a.dest == "command").choices
    assert set(commands) == set(COMMAND_LINES) | NO_PROFILE, "a command without a line in COMMAND_LINES"
    (tmp_path / "rows.jsonl").write_text('{"row_id": "a", "messages": []}\n')
    with _written("harvest.samples_per_task", -3) as path:
        for key, where in (("APSFT_STATE_DIR", "state"), ("APSFT_STORE_DIR", "store"), ("DAGSTER_HOME", "dagster")):
            monkeypatch.setenv(key, str(path.parent / where))
        for command, extra in [*COMMAND_LINES.items(), *MORE_LINES]:
            argv = [command, *[a.format(dir=tmp_path) for a in extra], "--config", str(path)]
            assert main(argv) == 2, argv
            assert "harvest.samples_per_task: Input should be greater than or equal to 1 (got -3)" in \
                capsys.readouterr().err, argv
            assert sorted(p.name for p in path.parent.iterdir()) == ["profile.yaml"], argv
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.jsonl"]
