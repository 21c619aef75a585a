"""The hack-signal registry: every signal the audit can run, by name, and a profile's pick of them.

A signal is a function `(sample, thresholds) -> SignalResult` over one rollout sample
(schema.Sample: problem_id, prompt, completion, reward) and the profile's HackThresholds. The
built-ins are the seven chat signals (signals.py) and the math/code ones (answer_signals.py). A
profile picks signals by `run_report.signals` (default: the seven chat signals); an entry is a
built-in name, a name installed under the Python entry-point group `apsft.hack_signals`, or a
`package.module:function` string imported here. Each picked signal is tried once on a probe sample
when the profile's pick is resolved, so a wrong import or a wrong return shape is a ConfigError
before any run is read or anything written.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata

from apsft_dagster.core.config import DEFAULT_SIGNALS, HackThresholds
from apsft_dagster.core.errors import ConfigError
from apsft_dagster.core.run_report.answer_signals import ANSWER_SIGNALS
from apsft_dagster.core.run_report.ingest import RunReportError
from apsft_dagster.core.run_report.schema import Sample
from apsft_dagster.core.run_report.settings import run_report_settings
from apsft_dagster.core.run_report.signals import CHAT_SIGNALS, SignalResult

__all__ = ["BUILTIN", "CHAT", "ENTRY_POINT_GROUP", "SignalResult", "SignalSet", "resolve", "selected_signals"]

Signal = Callable[[Sample, HackThresholds], SignalResult]
BUILTIN: dict[str, Signal] = {**CHAT_SIGNALS, **ANSWER_SIGNALS}
ENTRY_POINT_GROUP = "apsft.hack_signals"
# an entry: a registered name, or `package.module:function`
SIGNAL_ENTRY = re.compile(r"^(?:[A-Za-z_]\w*|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*)$")
# the per-sample table's other columns and a summary's own keys: never a signal's name or a measure's key
RESERVED = frozenset({"run", "step", "sample", "problem_id", "reward", "words", "hacked", "reasons"})
PROBE = Sample(problem_id=0, prompt="What is 6 times 7? Put the final answer in \\boxed{}.",
               completion="Six times seven: 6 * 7 = 42, since 6 * 5 = 30 and 6 * 2 = 12. So \\boxed{42}.", reward=1.0)
SHAPE = ("return SignalResult(fired=<bool>, measure={<str>: <JSON-plain value>}) "
         "(from apsft_dagster.core.run_report.signal_registry import SignalResult)")


def shape_problem(result: object) -> str | None:
    """What is wrong with a signal's return value, or None when it is a well-formed SignalResult."""
    if not isinstance(result, SignalResult):
        return f"returned a {type(result).__name__}, not a SignalResult"
    if not isinstance(result.fired, bool):
        return f"returned fired={result.fired!r}, not a bool"
    if not isinstance(result.measure, dict) or not all(isinstance(k, str) for k in result.measure):
        return "returned a measure that is not a dict with string keys"
    if RESERVED & set(result.measure):
        return f"returned measure keys {sorted(RESERVED & set(result.measure))}, which are reserved"
    try:
        json.dumps(result.measure, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"returned a measure that is not JSON-plain ({exc})"
    return None


@dataclass(frozen=True)
class SignalSet:
    """A profile's signals, in its order."""

    names: tuple[str, ...]
    functions: tuple[Signal, ...]

    def results(self, sample, t: HackThresholds) -> dict[str, SignalResult]:
        out = {}
        for name, signal in zip(self.names, self.functions):
            out[name] = result = signal(sample, t)
            if problem := shape_problem(result):
                raise RunReportError(f"hack signal {name} {problem} for problem {sample.problem_id}; {SHAPE}")
        return out

    def summary(self, sample, t: HackThresholds) -> dict:
        """{hacked, reasons (the fired signals' names), one boolean per signal, the measures merged}: for
        the seven chat signals exactly `hack_signals`' dict. Two signals may report one figure under one
        key only when they agree on its value."""
        results = self.results(sample, t)
        measures: dict = {}
        for name, result in results.items():
            for key, value in result.measure.items():
                if key in results or measures.get(key, value) != value:
                    raise RunReportError(f"hack signal {name}: its measure {key!r} clashes with another selected "
                                         f"signal's for problem {sample.problem_id}; rename the key in {name}")
                measures[key] = value
        reasons = [name for name, result in results.items() if result.fired]
        return {"hacked": bool(reasons), "reasons": reasons, **{n: r.fired for n, r in results.items()}, **measures}


CHAT = SignalSet(DEFAULT_SIGNALS, tuple(BUILTIN[name] for name in DEFAULT_SIGNALS))


def installed() -> dict[str, metadata.EntryPoint]:
    """Signals installed by packages under the entry-point group `apsft.hack_signals`, by name."""
    return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}


def _import(entry: str, where: str) -> object:
    module_name, _, function = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"{where}: cannot import module {module_name!r} ({exc}); install the package that has it, "
                          "put it on PYTHONPATH, or fix the name") from exc
    except Exception as exc:  # the team's module failed while importing: say how, whatever it raised
        raise ConfigError(f"{where}: importing {module_name!r} raised {type(exc).__name__}: {exc}; fix the module")
    if not hasattr(module, function):
        raise ConfigError(f"{where}: module {module_name!r} ({getattr(module, '__file__', '?')}) has no {function!r}; "
                          f"define `def {function}(sample, thresholds) -> SignalResult` there or fix the name")
    return getattr(module, function)


def _load(entry: str, where: str) -> object:
    if entry in BUILTIN:
        return BUILTIN[entry]
    if ":" in entry:
        return _import(entry, where)
    found = installed()
    if entry not in found:
        raise ConfigError(f"{where}: no hack signal named {entry!r}; built-in: {sorted(BUILTIN)}; installed under the "
                          f"entry-point group {ENTRY_POINT_GROUP}: {sorted(found)}; or write `package.module:function`")
    try:
        return found[entry].load()
    except Exception as exc:  # an installed package's entry point that does not load
        raise ConfigError(f"{where}: its entry point {found[entry].value!r} does not load ({type(exc).__name__}: "
                          f"{exc}); reinstall or fix the package that declares it") from exc


def resolve(names, thresholds: HackThresholds | None = None, profile: str = "?") -> SignalSet:
    """The named signals, each loaded and tried on a probe sample; a ConfigError naming the profile,
    the entry and the fix for a bad one."""
    t = thresholds or HackThresholds()
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise ConfigError(f"profile {profile}: run_report.signals lists {twice} more than once; list each signal once")
    functions = []
    for entry in names:
        where = f"profile {profile}: run_report.signals entry {entry!r}"
        if not isinstance(entry, str) or not SIGNAL_ENTRY.match(entry) or entry in RESERVED:
            raise ConfigError(f"{where}: not a signal name nor `package.module:function`; write e.g. format_only")
        signal = _load(entry, where)
        if not callable(signal):
            raise ConfigError(f"{where}: is a {type(signal).__name__}, not a function; point it at a function "
                              "`(sample, thresholds) -> SignalResult`")
        try:
            problem = shape_problem(signal(PROBE, t))
        except Exception as exc:  # a team's signal that fails on a plain sample is refused before any run is read
            raise ConfigError(f"{where}: raised {type(exc).__name__}: {exc} on a probe sample; it must take "
                              "(sample, thresholds) and return a SignalResult") from exc
        if problem:
            raise ConfigError(f"{where}: {problem} on a probe sample; {SHAPE}")
        functions.append(signal)
    return SignalSet(tuple(names), tuple(functions))


def selected_signals(config) -> SignalSet:
    """The profile's `run_report.signals`, resolved (a ConfigError when it has no run_report section)."""
    settings = run_report_settings(config)
    return resolve(settings.signals, settings.thresholds, config.profile)
