"""Adding a split, an arm or a task family is a registry row, the config and the protocol document:
each test copies the package, adds a throwaway row to the table (core/splits.py, core/selection/arms.py,
core/tasks/__init__.py's BUILDERS) as a developer would, gives the config what it needs, and runs
the readers in a fresh interpreter over the copy (the package and configs found from it, never from
this checkout). The in-process tests check that each registry is the only list of its names."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from typing import get_args

import pytest
from pydantic import ValidationError

from apsft_dagster.core.config import KNOWN_FAMILIES, Split
from apsft_dagster.core.domains import domains
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.selection.arms import ARMS, Rule
from apsft_dagster.core.selection.rules import CROSS_TASK_RULES, TASK_RULES
from apsft_dagster.core.tasks import BUILDERS, STEPS_BY_LEVEL, generate
from solvers import SOLVERS


def _add_after(path, anchor: str, row: str) -> None:
    text = path.read_text()
    assert text.count(anchor) == 1, anchor
    path.write_text(text.replace(anchor, anchor + "\n" + row))


def _copy_with_row(tmp_path, registry: str, anchor: str, row: str):
    """The package, configs and SQL audits copied to tmp_path with `row` added after `anchor`."""
    for folder in ("apsft_dagster", "configs", "dbt_like_sql"):
        shutil.copytree(PROJECT_ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    _add_after(tmp_path / "apsft_dagster" / "core" / registry, anchor, row)
    return tmp_path


def _run(root, script: str) -> dict:
    """`script` in a fresh interpreter whose apsft_dagster is the copy's; it prints one JSON object."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(root)},
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_a_throwaway_split_is_one_row_and_one_config_block(tmp_path):
    root = _copy_with_row(tmp_path, "splits.py", '    SplitSpec("held_family", "stage_a", families="held_out"),',
                          '    SplitSpec("core_extra", "stage_a", families="train"),')
    smoke = root / "configs" / "smoke.yaml"
    text = smoke.read_text()
    block = text[text.index("  core_hard:"):text.index("  held_family:")]
    smoke.write_text(text.replace(block, block + block.replace("core_hard", "core_extra")))
    result = _run(root, """
        import json
        import polars as pl
        import apsft_dagster
        from apsft_dagster.core.config import load_config
        from apsft_dagster.core.tasks.catalog import build_catalog, check_cell_counts, check_firewall
        from apsft_dagster.core.evaluation.generations import eval_tasks
        from apsft_dagster.core.evaluation.summary import SHOWN_FIGURES, policy_figures
        from apsft_dagster.core.analysis import stage_a_decision
        from apsft_dagster.core.selection.arms import ARMS

        config = load_config("smoke")
        catalog = build_catalog(config)
        tasks = eval_tasks(catalog)
        table = tasks.with_columns(correct=pl.col("index") % 2 == 0, parsed=pl.lit(True), closed=pl.lit(True),
                                   loop=pl.lit(False), thought_tokens=pl.lit(10), forward_tokens=pl.lit(20))
        figures = policy_figures(table, n_resamples=100, seed=0, confidence=0.95)
        results = pl.concat([table.select("task_id", "split", "family", "correct", "parsed")
                             .with_columns(arm=pl.lit(a)) for a in ARMS])
        decision = stage_a_decision(results, n_resamples=100, seed=0, thresholds=config.stage_b)
        print(json.dumps({"package": apsft_dagster.__file__, "splits": sorted(set(catalog["split"])),
                          "extra_tasks": catalog.filter(pl.col("split") == "core_extra").height,
                          "cells": check_cell_counts(catalog, config), "firewall": check_firewall(catalog),
                          "evaluated": sorted(set(tasks["split"])), "figure": figures.get("core_extra_accuracy"),
                          "shown": "core_extra_accuracy" in SHOWN_FIGURES, "verdict": decision["verdict"]}))
    """)
    assert result["package"].startswith(str(root))
    assert result["splits"] == ["core_extra", "core_hard", "core_iid", "held_family", "rendering", "train"]
    assert result["extra_tasks"] == 12 and result["cells"] == [] and result["firewall"] == []  # 3 x 2 x per_cell 2
    assert result["evaluated"] == ["core_extra", "core_hard", "core_iid", "held_family"]
    assert result["figure"] == 0.5 and result["shown"]  # indices 0, 1 per cell: half correct
    assert result["verdict"] == "CORE_BANKING_NEGATIVE"  # identical arms trigger nothing


def test_a_throwaway_arm_is_one_row(tmp_path):
    anchor = '    ArmSpec("random_natural", "baseline", "random", matched_to="answer_potential"),'
    root = _copy_with_row(tmp_path, "selection/arms.py", anchor, anchor.replace("random_natural", "random_twin"))
    result = _run(root, """
        import json
        import duckdb
        import polars as pl
        from apsft_dagster.core.analysis import BASELINES, stage_a_decision
        from apsft_dagster.core.selection.arms import ARMS
        from apsft_dagster.core.audits import TABLE_VIEWS
        from apsft_dagster.core.config import load_config
        from apsft_dagster.core.policies import parse_policy, policy_keys
        from apsft_dagster.core.selection.rules import select_arms
        from apsft_dagster.core.stage_b import plan

        rows = [{"task_id": task, "trace_id": f"{task}/{i}", "family": "caravan", "level": 1, "eligible": True,
                 "answer_gain": 1.0 - 0.1 * i, "joint_gain": 0.5 - 0.05 * i, "n_thought_tokens": 10 + 3 * i,
                 "r1_success": i == 2, "thought": f"step {i}\\nline {task}"} for task in "ABC" for i in range(6)]
        arms = select_arms(pl.DataFrame(rows), seed=7)
        twin, natural = arms["random_twin"], arms["random_natural"]
        iid = [{"task_id": f"t{i}", "split": "core_iid", "family": "caravan", "parsed": True} for i in range(20)]
        best = {"random_twin": 15, "answer_potential": 16}  # the twin is the strongest baseline
        results = pl.DataFrame([{**r, "arm": a, "correct": i < best.get(a, 10)} for a in ARMS
                                for i, r in enumerate(iid)])
        config = load_config("smoke")
        decision = stage_a_decision(results, n_resamples=200, seed=0, thresholds=config.stage_b)
        decision["conditions"]["answer_potential"]["checks"] = {"forced": True}
        decision["conditions"]["answer_potential"]["triggered"] = True
        decision["triggered"] = ["answer_potential"]
        stage_b = plan(decision, 43, 42)
        arm_view = duckdb.sql(TABLE_VIEWS["arms"]).fetchall()
        print(json.dumps({"arms": list(arms), "twin_rows": twin.height, "twin_tasks": sorted(set(twin["task_id"])),
                          "twin_modes": sorted(set(twin["mode"])), "named": sorted(set(twin["arm"])),
                          "same_sources": twin["source_trace_id"].to_list() == natural["source_trace_id"].to_list(),
                          "baselines": list(BASELINES),
                          "strongest": decision["strongest_baseline"], "replication": stage_b["replication_policies"],
                          "policy": parse_policy("random_twin-seed43"), "keys": len(policy_keys(config)),
                          "view": [r for r in arm_view if r[0] == "random_twin"]}))
    """)
    assert result["arms"] == ["answer_potential", "joint_potential", "random_natural", "random_twin", "success_rft",
                              "shortest_natural", "potential_shuffle"]
    assert result["twin_rows"] == 6 and result["twin_tasks"] == ["A", "B", "C"]  # two rows per task
    # the random rule under its own name: lengths here never tie, so it picks what random_natural picks
    assert result["twin_modes"] == ["length_matched"] and result["named"] == ["random_twin"] and result["same_sources"]
    assert result["baselines"] == ["random_natural", "random_twin", "success_rft", "shortest_natural"]
    assert result["strongest"] == "random_twin"
    assert result["replication"] == ["answer_potential-seed43", "random_twin-seed43"]
    assert result["policy"] == ["random_twin", 43] and result["keys"] == 14  # 7 arms x 2 seeds
    assert result["view"] == [["random_twin", "baseline", "random", True, False]]


def test_the_family_registry_is_the_config_s_only_list_of_families():
    """BUILDERS is the one list: the config's families (the domain its model declares) are its names in its
    order, a name outside it is refused, and every entry builds a task at every level (and has its solver)."""
    (families,) = [d for d in domains(Split) if d.field == "families"]
    literal = families.item.choices
    assert literal == KNOWN_FAMILIES == tuple(BUILDERS)
    assert Split(families=list(BUILDERS), levels=[1], per_cell=1, total=len(BUILDERS)).families == list(BUILDERS)
    with pytest.raises(ValidationError, match="nonesuch"):
        Split(families=["caravan", "nonesuch"], levels=[1], per_cell=1, total=2)
    for family in BUILDERS:
        for level in STEPS_BY_LEVEL:
            task = generate(family, level, 0, 0)
            assert task.family == family and task.prompt and task.answer and task.solution, (family, level)
    assert set(SOLVERS) == set(BUILDERS)  # tests/test_tasks.py checks each builder against its solver


def test_every_row_rule_is_in_exactly_one_rule_table():
    assert set(TASK_RULES) | set(CROSS_TASK_RULES) == set(get_args(Rule))
    assert not set(TASK_RULES) & set(CROSS_TASK_RULES)


def test_no_arm_is_named_outside_the_arm_table():
    """Code and SQL audits pick arms by the table's attributes (role, row rule, score), never by
    name. core/plan/registered.py is data: the registered per-arm token figures."""
    quoted = re.compile(r"""(["'])(%s)\1""" % "|".join(ARMS))
    allowed = {"apsft_dagster/core/selection/arms.py", "apsft_dagster/core/plan/registered.py"}
    files = [p.relative_to(PROJECT_ROOT).as_posix() for pattern in ("apsft_dagster/**/*.py", "dbt_like_sql/*.sql")
             for p in PROJECT_ROOT.glob(pattern)]
    named = [f"{f}:{n}" for f in sorted(set(files) - allowed)
             for n, line in enumerate((PROJECT_ROOT / f).read_text().splitlines(), 1) if quoted.search(line)]
    assert named == []


_TALLYWICK = '''"""tallywick (throwaway): a tally through additions."""

from __future__ import annotations

import random


def build(rng: random.Random, level: int, steps: int) -> tuple[str, str, str]:
    n = rng.randint(100, 999)
    adds = [rng.randint(10, 99) for _ in range(steps)]
    prompt = f"A tally starts at {n}. " + " ".join(f"Add {a}." for a in adds) + " What is the tally?"
    return prompt, str(n + sum(adds)), "\\n".join([f"Start: {n}.", *(f"Add {a}." for a in adds), "Done."])
'''


def test_a_throwaway_family_is_its_builder_file_and_one_registry_entry(tmp_path):
    root = _copy_with_row(tmp_path, "tasks/__init__.py", '    "spindle": spindle.build,',
                          '    "tallywick": tallywick.build,')
    _add_after(root / "apsft_dagster" / "core" / "tasks" / "__init__.py",
               "from apsft_dagster.core.tasks import brinework, caravan, foundry_ledger, runeward, spindle",
               "from apsft_dagster.core.tasks import tallywick")  # the entry's import, in the same registry
    (root / "apsft_dagster" / "core" / "tasks" / "tallywick.py").write_text(_TALLYWICK)
    smoke = root / "configs" / "smoke.yaml"  # a config naming it: a third held family, 3 levels x 4 more tasks
    held = "held_family:  {families: [brinework, spindle], levels: [1, 2, 3], per_cell: 4, total: 24}"
    assert smoke.read_text().count(held) == 1
    smoke.write_text(smoke.read_text().replace(held, held.replace("spindle]", "spindle, tallywick]")
                                               .replace("total: 24", "total: 36")))
    result = _run(root, """
        import json
        import polars as pl
        from apsft_dagster.core.analysis import family_macro
        from apsft_dagster.core.config import KNOWN_FAMILIES, load_config
        from apsft_dagster.core.evaluation.generations import eval_tasks
        from apsft_dagster.core.tasks.catalog import (build_catalog, check_answer_not_in_prompt, check_cell_counts,
                                                     check_firewall)

        config = load_config("smoke")
        catalog = build_catalog(config)
        mine = catalog.filter(pl.col("family") == "tallywick")
        tasks = eval_tasks(catalog)
        print(json.dumps({"known": list(KNOWN_FAMILIES), "held": config.tasks.held_family.families,
                          "splits": sorted(set(mine["split"])), "levels": sorted(set(mine["level"])),
                          "prompts": mine["prompt"].to_list(), "answers": mine["answer"].to_list(),
                          "cells": check_cell_counts(catalog, config), "firewall": check_firewall(catalog),
                          "leaks": check_answer_not_in_prompt(catalog),
                          "macro": family_macro(tasks.with_columns(correct=pl.col("family") == "tallywick"))}))
    """)
    assert result["known"] == ["caravan", "foundry_ledger", "runeward", "brinework", "spindle", "tallywick"]
    assert result["held"] == ["brinework", "spindle", "tallywick"]
    assert result["splits"] == ["held_family"] and result["levels"] == [1, 2, 3] and len(result["prompts"]) == 12
    sums = [str(sum(int(x) for x in re.findall(r"\d+", p))) for p in result["prompts"]]  # start + every add
    assert result["answers"] == sums
    assert result["cells"] == [] and result["firewall"] == [] and result["leaks"] == []
    assert result["macro"] == pytest.approx(1 / 6)  # six families in Stage A, only tallywick's right
