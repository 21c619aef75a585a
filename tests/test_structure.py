"""The house's shape, read from the source with `ast`: no import circle inside the package, no
import from a lower layer up to a higher one (`LAYERS`), no wing importing another, no module over
300 lines, no function over 60, no line over the length pyproject.toml sets.

Imports count wherever they are written: a function-level import closes a circle as surely as a
top-level one, and one under `if TYPE_CHECKING:` ties the two modules as surely for a reader (and a type checker).
Importing the config loads no sibling core and no task builder, and at most `CONFIG_IMPORT_MODULES` modules.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import tomllib
from pathlib import Path

from apsft_dagster.core.paths import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "apsft_dagster"
MAX_MODULE_LINES = 300
MAX_FUNCTION_LINES = 60
CHECKED_TREES = ("apsft_dagster", "tests", "scripts", "benchmarks")


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the package modules it imports (type-only imports included). `from pkg import sub` names the
    submodule."""
    graph = {}
    for name, path in modules.items():
        tree, targets = ast.parse(path.read_text()), set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                targets.update(subs or [node.module])
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_hand_made_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e2"}, "e2": set()}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"x": {"y"}, "y": set()}) == []


def test_the_import_graph_reads_submodules_and_function_level_imports(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    import pkg.c\n")
    (pkg / "c.py").write_text("from pkg.a import thing\n")
    graph = import_graph(_modules(pkg))
    assert graph == {"pkg": set(), "pkg.a": {"pkg.b"}, "pkg.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_a_planted_type_only_circle_fails(tmp_path):
    """Two tiny modules that import each other, one only under `if TYPE_CHECKING:`: a circle all the same."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("def bind():\n    from pkg.rehearsal import check\n")
    (pkg / "rehearsal.py").write_text("from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n"
                                      "    from pkg.config import Config\n")
    graph = import_graph(_modules(pkg))
    assert graph == {"pkg": set(), "pkg.config": {"pkg.rehearsal"}, "pkg.rehearsal": {"pkg.config"}}
    assert circles(graph) == [["pkg.config", "pkg.rehearsal"]]
    (pkg / "rehearsal.py").write_text("from typing import TYPE_CHECKING\n")  # the type-only import gone: no circle
    assert circles(import_graph(_modules(pkg))) == []


def test_the_package_has_no_import_circle():
    assert circles(import_graph(_modules())) == []


# What `import apsft_dagster.core.config` may load: none of the sibling cores or the task builders (a split's families
# and levels are read from the builders when a profile is validated), and at most CONFIG_IMPORT_MODULES of the
# package's modules. Measured at 40: the config folder's 29, the package root's 4 (kernel pins, errors), paths,
# json_input, protocol, splits and task_file.names; before the config folder it loaded 57, 19 of the RL report's.
CONFIG_IMPORT_MODULES = 40
NOT_LOADED_BY_CONFIG = ("apsft_dagster.core.loss_mask", "apsft_dagster.core.run_report", "apsft_dagster.core.tasks")


def test_importing_the_config_loads_no_sibling_core_and_no_task_builder():
    code = "import json, sys\nimport apsft_dagster.core.config\nprint(json.dumps(sorted(sys.modules)))"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=PROJECT_ROOT)
    ours = [m for m in json.loads(run.stdout) if m == "apsft_dagster" or m.startswith("apsft_dagster.")]
    assert "apsft_dagster.core.config.schema" in ours and "apsft_dagster.core.config.sections.tasks" in ours
    assert [m for m in ours if any(m == p or m.startswith(f"{p}.") for p in NOT_LOADED_BY_CONFIG)] == []
    assert len(ours) <= CONFIG_IMPORT_MODULES, ours


# Top to bottom; a module imports only from its own layer or a lower one. The package root (its
# kernel pins) and every module not named here are the shared glue: stage, profile, run_tags,
# run_coordinator, run_recovery, assets/, resources/, sensors/.
LAYERS = ("cli", "runner", "definitions", "wings", "glue", "core")
WINGS = ("experiment", "loss_mask", "run_report")


def layer(module: str) -> tuple[int, str]:
    """(depth in LAYERS, the wing or layer name) of a package module."""
    top = module.split(".")[1] if "." in module else ""
    if top in WINGS:
        return LAYERS.index("wings"), top
    return (LAYERS.index(top), top) if top in LAYERS else (LAYERS.index("glue"), "glue")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import that runs from a lower layer up to a higher one, or from one wing into another."""
    found = []
    for importer, targets in sorted(graph.items()):
        (depth, home) = layer(importer)
        for target in sorted(targets):
            (target_depth, target_home) = layer(target)
            if target_depth < depth or (depth == target_depth == LAYERS.index("wings") and home != target_home):
                found.append(f"{importer} ({home}) -> {target} ({target_home})")
    return found


def test_the_layer_check_finds_planted_upward_and_sideways_imports():
    graph = {"apsft_dagster.core.x": {"apsft_dagster.runner"},  # core up to the runner
             "apsft_dagster.loss_mask.a": {"apsft_dagster.experiment.stages", "apsft_dagster.core.x"},
             "apsft_dagster.cli.run": {"apsft_dagster.runner", "apsft_dagster.definitions", "apsft_dagster.stage"},
             "apsft_dagster.stage": {"apsft_dagster.cli.args"}, "apsft_dagster.runner": {"apsft_dagster.definitions"},
             "apsft_dagster.definitions": {"apsft_dagster.experiment.stages", "apsft_dagster.sensors"}}
    assert upward_imports(graph) == [
        "apsft_dagster.core.x (core) -> apsft_dagster.runner (runner)",
        "apsft_dagster.loss_mask.a (loss_mask) -> apsft_dagster.experiment.stages (experiment)",
        "apsft_dagster.stage (glue) -> apsft_dagster.cli.args (cli)"]


def test_imports_run_one_way_from_the_commands_down_to_the_core():
    graph = import_graph(_modules())
    assert {layer(m)[1] for m in graph} == {*LAYERS} - {"wings"} | {*WINGS}  # every layer and wing is read
    assert upward_imports(graph) == []


def test_no_module_or_function_is_too_long():
    too_long = []
    for name, path in _modules().items():
        text = path.read_text()
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}:{node.lineno} {node.name}: {length} lines (at most {MAX_FUNCTION_LINES})")
    assert too_long == []
def test_no_line_is_longer_than_pyproject_says():
    limit = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
    assert limit == 120
    wide = [f"{path.relative_to(PROJECT_ROOT)}:{number}: {len(line)}"
            for tree in CHECKED_TREES for path in sorted((PROJECT_ROOT / tree).rglob("*.py"))
            for number, line in enumerate(path.read_text().splitlines(), 1) if len(line) > limit]
    assert wide == []


ASSET_MODULES = ("apsft_dagster.experiment.assets.", "apsft_dagster.loss_mask.assets", "apsft_dagster.loss_mask.pack",
                 "apsft_dagster.run_report.assets")


def test_asset_modules_import_only_asset_objects_from_each_other():
    """Helpers live in the core: what one asset module takes from another is an asset it depends on."""
    import importlib

    import dagster as dg

    modules = _modules()
    taken = []
    for name, path in modules.items():
        if not name.startswith(ASSET_MODULES):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(ASSET_MODULES):
                taken += [(name, node.module, alias.name) for alias in node.names]
    assert taken  # the check sees the imports it judges
    helpers = [f"{importer} takes {source}.{n}" for importer, source, n in taken
               if not isinstance(getattr(importlib.import_module(source), n), dg.AssetsDefinition)]
    assert helpers == []
