"""Two finished experiments side by side (`apsft compare STORE_A STORE_B`), from what each store already holds.

Nothing is recomputed: the numbers are those the stages wrote and the report reads (the evidence seal's bank
facts, the trace bank's funnel, the SFT manifest, Stage A's analysis document and Stage B's final one), each read
through its receipt. A store that is not a finished experiment store is refused by name before anything is read
further or written. Two stores of different profiles compare like any two: that is the point.
"""

from __future__ import annotations

from pathlib import Path

from apsft_dagster.core.compare_config import config_differences, recorded_config
from apsft_dagster.core.errors import CompareError
from apsft_dagster.core.layout import (
    BASE_MODEL_REPORT,
    EVIDENCE_SEAL,
    SFT_MANIFEST,
    STAGE_A_DECISION,
    STAGE_B_DECISION,
    TRACE_BANK,
    summary_file,
)
from apsft_dagster.core.policies import BASE, arm_and_seed
from apsft_dagster.core.seal import BANKS
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.splits import PRIMARY, SECONDARY
from apsft_dagster.core.store import Store
from apsft_dagster.core.store_owner import OWNER_FILE, owner
from apsft_dagster.core.verdicts import SHORTEST_LEADS

# what a finished experiment store holds, and the stage that writes it (named in a refusal)
FINISHED = {BASE_MODEL_REPORT: "base_model", summary_file(TRACE_BANK): "trace_bank", EVIDENCE_SEAL: "evidence_seal",
            SFT_MANIFEST: "sft_arms", STAGE_A_DECISION: "stage_a_analysis", STAGE_B_DECISION: "stage_b_analysis"}
SIDES = ("A", "B")


def _problem(location: str) -> str | None:
    """Why the folder at `location` is not a finished experiment store, or None when it is one."""
    root = Path(location)
    if not root.is_dir():
        return f"store {location}: no such folder"
    store = Store(root)
    if not (store.exists(OWNER_FILE) or store.exists(EVIDENCE_SEAL)):
        return (f"store {location}: not an apsft store (no {OWNER_FILE}, no {EVIDENCE_SEAL}); name a store "
                "`apsft run` made")
    missing = [f"{name} (the {stage} stage)" for name, stage in FINISHED.items() if not store.exists(name)]
    if missing:
        return (f"store {location}: not a finished experiment (missing {', '.join(missing)}); finish its run "
                f"(`apsft run --store {location}` with its profile) first")
    return None


def open_finished(locations: list[str]) -> list[Store]:
    """Each store, once every one is a finished experiment store; CompareError naming each that is not."""
    problems = [p for p in map(_problem, locations) if p]
    if problems:
        raise CompareError("; ".join(problems) + ". Nothing was written")
    return [Store(location) for location in locations]


def read_experiment(store: Store) -> dict:
    """What `compare` shows of one store, each number as its stage wrote it."""
    seal = store.get_json(EVIDENCE_SEAL)
    analysis, final = store.get_json(STAGE_A_DECISION), store.get_json(STAGE_B_DECISION)
    recorded = owner(store) or {"profile": seal["profile"], "sealed_profile": seal["profile"]}
    return {"location": str(store.root), "profile": recorded["profile"], "base": store.get_json(BASE_MODEL_REPORT),
            "seal": seal, "config": recorded_config(store, seal), "funnel": store.get_json(summary_file(TRACE_BANK)),
            "selection": {e["arm"]: e for e in store.get_json(SFT_MANIFEST)["arms"]},
            "policies": _in_order({arm_and_seed(p)[0]: f for p, f in analysis["policies"].items()}),
            "decision": analysis["decision"], "verdict": analysis["verdict"], "final": final,
            "rehearsal": final.get("rehearsal")}


def _in_order(by_policy: dict) -> dict:
    """Base first, then the arms in the arm table's order (the analysis document sorts its keys)."""
    return {p: by_policy[p] for p in sorted(by_policy, key=[BASE, *ARMS].index)}


def _f(value, digits: int = 4) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _interval(figures: dict | None, key: str, lower: str, upper: str) -> str:
    if figures is None:
        return "n/a"
    return f"{_f(figures[key])} [{_f(figures[lower])}, {_f(figures[upper])}]"


def _delta(a, b) -> str:
    if isinstance(a, int) and isinstance(b, int):
        return f"{b - a:+d}"
    return f"{b - a:+.4f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) else "n/a"


def _pairs(names: list[tuple[str, object, object]]) -> list[dict]:
    return [{"what": name, "A": _f(x), "B": _f(y), "B - A": _delta(x, y)} for name, x, y in names]


def architecture(base: dict) -> str:
    """The base model's class: the embedded build's report says it; a local snapshot's description holds it."""
    return base.get("architecture") or ", ".join(base.get("snapshot", {}).get("architectures") or ["?"])


def _identity(a: dict, b: dict) -> list[dict]:
    def one(side: dict) -> dict:
        base, seal = side["base"], side["seal"]
        return {"store": side["location"], "profile": side["profile"], "sealed profile": seal["profile"],
                "config digest": side["config"]["digest"], "config fields from": side["config"]["source"],
                "base model": f"{base['name']} ({architecture(base)}, {base['source']})",
                "base model fingerprint": base["fingerprint"], "experiment seed": side["decision"]["seed"],
                "amendments": len(seal["amendments"]["records"])}
    x, y = one(a), one(b)
    return [{"what": k, "A": _f(x[k]), "B": _f(y[k]), "same": "yes" if x[k] == y[k] else "no"} for k in x]


def _banks(a: dict, b: dict) -> list[dict]:
    def facts(side: dict) -> dict:
        seal, funnel = side["seal"], side["funnel"]
        return {"train tasks (trace_bank shards)": seal["banks"][TRACE_BANK]["shards"], "traces": seal["traces"],
                "eligible traces": seal["eligible"], "loops": funnel["loops"],
                "natural closes": funnel["natural_closes"],
                "excluded tasks": len(funnel["excluded_tasks"]),
                **{f"{bank} shards": seal["banks"][bank]["shards"] for bank in BANKS[1:]},
                "score_bank and r1_labels rows (= eligible, sealed)": seal["eligible"]}
    x, y = facts(a), facts(b)
    return _pairs([(k, x[k], y[k]) for k in x])


def _selection(a: dict, b: dict) -> list[dict]:
    rows = []
    for arm in _ordered(a["selection"], b["selection"]):
        x, y = a["selection"].get(arm, {}), b["selection"].get(arm, {})
        rows.append({"arm": arm, "rows A": _f(x.get("rows")), "rows B": _f(y.get("rows")),
                     "tasks A": _f(x.get("tasks")), "tasks B": _f(y.get("tasks")),
                     "modes A": _modes(x), "modes B": _modes(y),
                     "forward tokens A": _f(x.get("forward_tokens")), "forward tokens B": _f(y.get("forward_tokens"))})
    return rows


def _modes(entry: dict) -> str:
    return ", ".join(f"{m} {n}" for m, n in entry.get("mode_counts", {}).items()) or "n/a"


def _ordered(x: dict, y: dict) -> list[str]:
    """Keys of both, A's order first, then B's others."""
    return [*x, *(k for k in y if k not in x)]


def _accuracy(a: dict, b: dict) -> list[dict]:
    rows, hi, lo, acc = [], f"{PRIMARY}_upper", f"{PRIMARY}_lower", f"{PRIMARY}_accuracy"
    for policy in _ordered(a["policies"], b["policies"]):
        x, y = a["policies"].get(policy), b["policies"].get(policy)
        rows.append({"policy": policy,
                     f"{PRIMARY} A": _interval(x, acc, lo, hi), f"{PRIMARY} B": _interval(y, acc, lo, hi),
                     "B - A": _delta(x and x[acc], y and y[acc]),
                     **{f"{s} {side}": _f(f and f[f"{s}_accuracy"]) for s in SECONDARY
                        for side, f in (("A", x), ("B", y))},
                     "parse A": _f(x and x["parse_rate"]), "parse B": _f(y and y["parse_rate"])})
    return rows


def _margins(a: dict, b: dict) -> list[dict]:
    rows = []
    for arm in _ordered(a["decision"]["conditions"], b["decision"]["conditions"]):
        row = {"arm": arm}
        for side, s in (("A", a), ("B", b)):
            c = s["decision"]["conditions"].get(arm)
            row[f"baseline {side}"] = s["decision"]["strongest_baseline"]
            row[f"margin {side}"] = _interval(c, "margin", "lower", "upper")
            row[f"triggered {side}"] = _f(c and c["triggered"])
            row[f"failed {side}"] = (", ".join(k for k, ok in c["checks"].items() if not ok) or "none") if c else "n/a"
        rows.append(row)
    return rows


def _verdicts(a: dict, b: dict) -> list[dict]:
    def facts(side: dict) -> dict:
        d, final = side["decision"], side["final"]
        return {"Stage A verdict": side["verdict"], "strongest baseline": d["strongest_baseline"],
                "triggered": ", ".join(d["triggered"]) or "none", SHORTEST_LEADS: _f(d["shortest_leads"]),
                "final verdict": final["final_verdict"], "rule": final["rule"],
                "rehearsal of": (side["rehearsal"] or {}).get("registered_profile", "no"),
                **{f"Stage B {rung} margin": _interval(final.get(rung), *fields) for rung, fields in RUNGS.items()}}
    x, y = facts(a), facts(b)
    return [{"what": k, "A": x[k], "B": y[k], "same": "yes" if x[k] == y[k] else "no"} for k in x]


RUNGS = {"comparison": ("margin", "lower", "upper"), "replication": ("pooled_mean", "pooled_lower", "pooled_upper"),
         "matched_compute": ("margin", "lower", "upper")}


def comparison(a: dict, b: dict) -> dict:
    """The side-by-side document: sections of rows (each a table), and each side's accuracies for the plot."""
    ca, cb = a["config"], b["config"]
    differences = config_differences(ca, cb)
    same = ca["digest"] == cb["digest"]
    note = ("equal config digests: the same sealed config" if same else
            f"config digests differ ({ca['digest'][:12]} vs {cb['digest'][:12]}); {len(differences)} field(s) "
            "differ" + ("" if ca["complete"] and cb["complete"] else
                        " among those both stores record (one store records only some fields)"))
    return {"stores": {"A": a["location"], "B": b["location"]}, "profiles": {"A": a["profile"], "B": b["profile"]},
            "config_differences": differences,
            "sections": [("Stores", None, _identity(a, b)),
                         ("Config differences", note, differences),
                         ("Banks", None, _banks(a, b)),
                         ("Selection (SFT arms)", None, _selection(a, b)),
                         (f"Stage A accuracy ({PRIMARY} with its {_f(a['decision']['confidence'], 2)} / "
                          f"{_f(b['decision']['confidence'], 2)} task bootstrap interval)", None, _accuracy(a, b)),
                         ("Margins over the strongest baseline (core IID, paired bootstrap interval)", None,
                          _margins(a, b)),
                         ("Verdicts", None, _verdicts(a, b))],
            "accuracy": {side: {p: (f[f"{PRIMARY}_accuracy"], f[f"{PRIMARY}_lower"], f[f"{PRIMARY}_upper"])
                                for p, f in s["policies"].items()} for side, s in zip(SIDES, (a, b))}}


def compare_stores(location_a: str, location_b: str) -> dict:
    """Refuse either store unless finished, then read both and put them side by side."""
    store_a, store_b = open_finished([location_a, location_b])
    return comparison(read_experiment(store_a), read_experiment(store_b))
