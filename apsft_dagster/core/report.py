"""The experiment report: Markdown in the shape of the seed's, and its plots (docs/PROTOCOL.md §14).

Built only from stored, receipted artifacts; no timestamp and fixed float formats, so a rerun
writes the same bytes. Sections: question, status and verdict, harvest funnel, parity, selection
(modes, fallback gaps), dose and device-hours, training, Stage A table with intervals, each gate
condition, the joint arm's strata, Stage B when it ran (accuracy by split, each rung of the
ladder, the sampled arms), amendments with their derived classes, artifact hashes.
"""

from __future__ import annotations

import polars as pl

from apsft_dagster.core import amendments, report_plots
from apsft_dagster.core.config import Config
from apsft_dagster.core.evaluation.summary import base_accuracy_informative, base_accuracy_note
from apsft_dagster.core.layout import (
    EVIDENCE_SEAL,
    PARITY_GATE,
    SFT_MANIFEST,
    STAGE_A_DECISION,
    STAGE_B_DECISION,
    TRACE_BANK,
    adapter_report,
    arm_rows,
    eval_table,
    merged_report,
    probe_report,
    stage_b_sample_table,
    stage_b_table,
    summary_file,
)
from apsft_dagster.core.parity import scoring_instrument
from apsft_dagster.core.policies import BASE, stage_a_policies
from apsft_dagster.core.rehearsal import LABEL, changes_text, labelled
from apsft_dagster.core.selection.arms import ARMS, arms_with
from apsft_dagster.core.splits import PRIMARY, SECONDARY
from apsft_dagster.core.store import Store
from apsft_dagster.core.verdicts import SHORTEST_LEADS

QUESTION = ("Does training on the thoughts that most raise the likelihood of the correct answer (answer or joint "
            "potential) bank more reasoning than training on ordinary traces of the same tasks?")
PLOTS = ("accuracy", "fallback_gaps", "thought_lengths", "loss_curves")


def _f(value, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _table(rows: list[dict]) -> list[str]:
    if not rows:
        return ["(none)"]
    head = list(rows[0])
    return (["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
            + ["| " + " | ".join(_f(r[h]) for h in head) + " |" for r in rows])


def stage_b_section(final: dict) -> list[str]:
    """Stage B's tables when it ran; nothing when Stage A did not trigger (the status says why)."""
    if not final["plan"]["triggered"]:
        return []
    plan, first, second, third = final["plan"], final["comparison"], final["replication"], final["matched_compute"]
    splits = sorted({s for acc in final["accuracy"].values() for s in acc})
    return ["## Stage B", "",
            f"Winner `{plan['winner']}` against its strongest baseline `{plan['baseline']}`; greedy on "
            f"{', '.join(splits)}; {len(plan['sampled_policies'])} policies sampled k times per task.", "",
            "### Greedy accuracy by split", "",
            *_table([{"policy": p, **acc} for p, acc in final["accuracy"].items()]), "",
            "### The ladder, rung by rung", "",
            *_table([{"rung": "comparison (core IID + rendering)", "margin": first["margin"], "lower": first["lower"],
                      "upper": first["upper"], "detail": f"parse-rate loss {_f(first['parse_rate_loss'])}, "
                                                         f"family-macro loss {_f(first['family_macro_loss'])}",
                      "passed": "yes" if first["passed"] else "no"},
                     {"rung": "seed-43 replication (pooled)", "margin": second["pooled_mean"],
                      "lower": second["pooled_lower"], "upper": second["pooled_upper"],
                      "detail": f"seed-43 core-IID margin {_f(second['second_seed_margin'])}",
                      "passed": "yes" if second["passed"] else "no"},
                     {"rung": "matched compute vs base sample-more", "margin": third["margin"], "lower": third["lower"],
                      "upper": third["upper"], "detail": f"base vote accuracy {_f(third['base_vote_accuracy'])}",
                      "passed": "yes" if third["passed"] else "no"}]), "",
            "### Sampled policies (core IID + rendering)", "",
            *_table([{"policy": p, **f} for p, f in final["sampled"].items()]), ""]


def _read(store: Store, config: Config) -> dict:
    """Everything the report shows, read once from the store."""
    analysis, final = store.get_json(STAGE_A_DECISION), store.get_json(STAGE_B_DECISION)
    policies = stage_a_policies(config)
    trained = [*policies, *final["plan"]["replication_policies"]]  # the seed-43 pair when Stage B ran
    rows = {arm: store.get_parquet(arm_rows(arm)) for arm in ARMS}
    return {"analysis": analysis, "final": final, "decision": analysis["decision"], "policies": policies,
            "figures": {p: analysis["policies"][p] for p in (BASE, *policies)},  # base first, then the arms in order
            "manifest": store.get_json(SFT_MANIFEST), "funnel": store.get_json(summary_file(TRACE_BANK)),
            "parity": store.get_json(PARITY_GATE),
            "adapters": {p: store.get_json(adapter_report(p)) for p in trained},
            "merged": {p: store.get_json(merged_report(p)) for p in trained},
            "probes": {p: store.get_json(probe_report(p)) for p in trained},
            "gaps": {arm: rows[arm].filter(pl.col("mode").is_in(["near_best_diverse", "fallback_second"]))["gap"]
                     .to_list() for arm in arms_with(role="potential")}}


def _status(config: Config, f: dict) -> list[str]:
    final, decision = f["final"], f["decision"]
    title = f"# Experiment report ({config.profile} profile)" + (f": {LABEL}" if final.get("rehearsal") else "")
    return [title, "", "## Question", "", QUESTION, "",
            "## Status and verdict", "",
            f"- Final verdict: {labelled(bold(final['final_verdict']), final)} ({final['rule']})",
            *_rehearsal(final),
            *([f"- Scoring instrument: {final['scoring']['reason']}"] if "scoring" in final else []),  # a failed gate
            f"- Stage A verdict: {labelled(bold(f['analysis']['verdict']), final)} (strongest trace baseline: "
            f"`{decision['strongest_baseline']}`; triggered: {', '.join(decision['triggered']) or 'none'})",
            f"- {SHORTEST_LEADS}: {'yes' if decision['shortest_leads'] else 'no'} "
            "(shortest_natural strictly above every other arm on core IID)",
            _base_accuracy(f),
            _detectable(f),
            "- Stage B: " + (f"triggered for {final['plan']['winner']} against {final['plan']['baseline']}"
                             if final["plan"]["triggered"] else
                             "not triggered; failed conditions: " + "; ".join(
                                 f"{arm}: {', '.join(r) or 'none'}" for arm, r in final["plan"]["reasons"].items())),
            ""]


def bold(text: str) -> str:
    return f"**{text}**"


def _rehearsal(final: dict) -> list[str]:
    """A rehearsal's line: which thresholds it changed, and the registered thresholds' verdict."""
    r = final.get("rehearsal")
    if not r:
        return []
    shown = changes_text(r["changed"], sep="; ", tick="`")
    return [f"- **This is a {LABEL}**, not the registered run: a rehearsal of `{r['registered_profile']}` (config "
            f"{r['config_digest'][:12]}, its Stage A sealed as {r['registered_digest'][:12]}); {shown}. By the "
            f"registered thresholds Stage A's verdict is **{r['registered_verdict']}**"]


def _base_accuracy(f: dict) -> str:
    """The base_accuracy_informative check, a warning: the verdict above stands either way (section 13)."""
    base = f["figures"][BASE][f"{PRIMARY}_accuracy"]
    verdict = "passed" if base_accuracy_informative(base) else "**warning**"
    return f"- Base accuracy check: {verdict}, {base_accuracy_note(base)}"


def _detectable(f: dict) -> str:
    """The minimum detectable effect of each potential arm's paired comparison, beside the verdict."""
    decision = f["decision"]
    shown = "; ".join(f"`{arm}` {_f(c['minimum_detectable_effect'], 3)} at {c['tasks']} tasks"
                      + ("" if c["minimum_detectable_effect"] else " (no discordant task: no spread to plan from)")
                      for arm, c in decision["conditions"].items())
    return (f"- Minimum detectable effect on {PRIMARY} (80% power, two-sided {decision['confidence']:.0%} interval, "
            f"each arm's observed spread of paired differences against the baseline): {shown}")


def _harvest_and_parity(config: Config, f: dict) -> list[str]:
    """The gate's worst metric against its threshold; the instrument that scored the bank, with the reason
    when the gate failed (a passed gate keeps the line it always had: the configured instrument scored)."""
    funnel, parity = f["funnel"], f["parity"]
    scored = config.scoring.instrument if parity["passed"] else scoring_instrument(parity, config)[1]
    return ["## Harvest funnel", "", *_table([funnel | {"excluded_tasks": len(funnel["excluded_tasks"])}]), "",
            "## Parity gate", "",
            f"Worst metric {parity['worst_metric']} = {_f(parity['worst_value'], 6)} against threshold "
            f"{parity['threshold']}: {'passed' if parity['passed'] else 'failed'} "
            f"(scoring instrument: {scored}).", ""]


def _selection(config: Config, f: dict) -> list[str]:
    manifest = f["manifest"]
    return ["## Selection", "",
            *_table([{"arm": e["arm"], "rows": e["rows"], "tasks": e["tasks"], "unique_sources": e["unique_sources"],
                      "modes": ", ".join(f"{m} {n}" for m, n in e["mode_counts"].items()),
                      "thought_tokens": e["thought_tokens"], "forward_tokens": e["forward_tokens"],
                      "device_hours": f"{e['device_hours']['low']:.4f}-{e['device_hours']['high']:.4f}"}
                     for e in manifest["arms"]]), "",
            "Second-row score gaps (best - chosen, nats per token): "
            + "; ".join(f"{a}: {len(g)} rows, median {_f(float(pl.Series(g).median()) if g else None)}"
                        for a, g in f["gaps"].items()), "",
            f"Dose: {manifest['forward_tokens']:,} forward tokens for the six arms at {config.training.epochs} epochs.",
            ""]


def _training(f: dict) -> list[str]:
    merged, probes = f["merged"], f["probes"]
    return ["## Training", "",
            *_table([{"policy": p, "steps": a["optimizer_steps"], "lora_pairs": a["lora_pairs"],
                      "first_loss": a["curve"][0]["loss"], "final_loss": a["curve"][-1]["loss"],
                      "base_weights": a["base_weights"], "merged_changed": merged[p]["changed_tensors"],
                      "probe_differs": f"{probes[p]['differing']}/{probes[p]['prompts']}"}
                     for p, a in f["adapters"].items()]), ""]


def _stage_a(f: dict) -> list[str]:
    decision = f["decision"]
    return ["## Stage A", "",
            *_table([{"policy": p, PRIMARY: x[f"{PRIMARY}_accuracy"],
                      "interval": f"[{_f(x[f'{PRIMARY}_lower'], 3)}, {_f(x[f'{PRIMARY}_upper'], 3)}]",
                      **{name: x[f"{name}_accuracy"] for name in SECONDARY},
                      "parse": x["parse_rate"], "closed": x["close_rate"], "loops": x["loop_rate"],
                      "family_macro": x["family_macro"], "thought_median": x["thought_tokens_median"],
                      "forward_tokens": x["forward_tokens"]} for p, x in f["figures"].items()]), "",
            "### Stage B trigger, condition by condition", "",
            *_table([{"arm": arm, "margin": c["margin"], "lower": c["lower"], "upper": c["upper"],
                      "beats_shuffle": c["beats_shuffle"], "parse_rate_loss": c["parse_rate_loss"],
                      "family_macro_loss": c["family_macro_loss"], "gate_reachable": c["gate_reachable"],
                      "failed": ", ".join(k for k, ok in c["checks"].items() if not ok) or "none",
                      "triggered": "yes" if c["triggered"] else "no"}
                     for arm, c in decision["conditions"].items()]), "",
            "Thresholds: " + ", ".join(f"{k} {v}" for k, v in decision["thresholds"].items()) + ".", "",
            "### Joint arm by selection stratum", "",
            *_table([{"stratum": k, **v} for k, v in f["analysis"]["joint_strata"]["strata"].items()]), ""]


def _amendments_and_hashes(store: Store, f: dict) -> list[str]:
    final, policies = f["final"], f["policies"]
    return ["## Amendments and deviations", "",
            *_table([{"seq": r["seq"], "date": r["date"], "class": r["classification"], "text": r["text"]}
                     for r in amendments.classified(store)]), "",
            "## Artifact hashes", "",
            *_table([{"artifact": name, "sha256": store.verify(name)}
                     for name in (EVIDENCE_SEAL, SFT_MANIFEST, STAGE_A_DECISION, STAGE_B_DECISION,
                                  *(eval_table(p) for p in (BASE, *policies)),
                                  *(stage_b_table(p) for p in final["plan"]["greedy_policies"]),
                                  *(stage_b_sample_table(p) for p in final["plan"]["sampled_policies"]))]
                    + [{"artifact": f"merged model {p}", "sha256": m["fingerprint"]} for p, m in f["merged"].items()]),
            "", "## Plots", "", *(f"![{name}]({name}.png)" for name in PLOTS), ""]


def report_summary(markdown: str) -> str:
    """The report's first screen: its title, the status and verdict, the Stage A table and the
    accuracy plot, cut from the report itself (so it cannot disagree with it)."""
    lines = markdown.splitlines()

    def section(heading: str, stop: str) -> list[str]:
        start = lines.index(heading)
        end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith(stop))
        return lines[start:end]
    return "\n".join([lines[0], "", *section("## Status and verdict", "## "), *section("## Stage A", "### "),
                      "![accuracy](accuracy.png)", "", "The whole report: the `report` entry and the `path` file."])


def build_report(store: Store, config: Config) -> tuple[str, dict[str, bytes]]:
    """The report's Markdown, section by section, and its plots."""
    f = _read(store, config)
    lines = [*_status(config, f), *_harvest_and_parity(config, f), *_selection(config, f), *_training(f),
             *_stage_a(f), *stage_b_section(f["final"]), *_amendments_and_hashes(store, f)]
    tables = {p: store.get_parquet(eval_table(p)) for p in (BASE, *f["policies"])}
    plots = {"accuracy": report_plots.accuracy_plot(f["figures"]),
             "fallback_gaps": report_plots.gap_histogram(f["gaps"]),
             "thought_lengths": report_plots.thought_lengths({p: t["thought_tokens"].to_list()
                                                             for p, t in tables.items()}),
             "loss_curves": report_plots.loss_curves({p: a["curve"] for p, a in f["adapters"].items()})}
    return "\n".join(lines), plots
