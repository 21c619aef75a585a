"""How `apsft run` shows its stages as they end, and the run's summary, verdict and next step."""

from __future__ import annotations


def print_stage(outcome) -> None:
    passed = sum(p for _, _, p in outcome.checks)
    figures = []
    for asset, count in outcome.materialized.items():
        shown = outcome.figures.get(asset, {})
        shown = {"cache": shown["cache"], **shown} if "cache" in shown else shown  # say first how the model came
        numbers = ", ".join(f"{k} {_short(v)}" for k, v in list(shown.items())[:3])
        figures.append(f"{asset} ({count} partitions)" if count > 1 else asset + (f" ({numbers})" if numbers else ""))
    status = "skip" if outcome.skipped else "ok" if outcome.ok else "FAILED"
    if outcome.skipped:
        figures = ["nothing to run (no partition asked for at run time)"]
    checks = f"checks {passed}/{len(outcome.checks)}" if outcome.checks else "no checks"
    figures += [f"{asset}:{name} failed (recorded)" for asset, name in outcome.recorded]
    print(f"  {outcome.job:<30} {status:<6} {outcome.seconds:7.1f} s  {checks:<13} {'; '.join(figures)}", flush=True)


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _verdict(store: str, failed: list) -> None:
    """After a run that reached the end: the verdict and where the report is."""
    from apsft_dagster.core.layout import REPORT_MARKDOWN, STAGE_B_DECISION
    from apsft_dagster.core.object_store import open_store

    s = open_store(store)
    if not failed and (line := verdict_line(s)):
        print(f"  verdict: {line}")
        if scoring := s.get_json(STAGE_B_DECISION).get("scoring"):  # a failed parity gate, stated with the verdict
            print(f"  scoring instrument: {scoring['reason']}")
        print(f"  report: {s.path(REPORT_MARKDOWN)}")


def verdict_line(store) -> str | None:
    """The final verdict, SHORTEST_BANKING_LEADS beside it, and the rule that fired."""
    from apsft_dagster.core.layout import REPORT_MARKDOWN, STAGE_A_DECISION, STAGE_B_DECISION
    from apsft_dagster.core.rehearsal import labelled
    from apsft_dagster.core.verdicts import SHORTEST_LEADS

    if not all(store.exists(n) for n in (REPORT_MARKDOWN, STAGE_A_DECISION, STAGE_B_DECISION)):
        return None
    final, stage_a = store.get_json(STAGE_B_DECISION), store.get_json(STAGE_A_DECISION)["decision"]
    leads = f" ({SHORTEST_LEADS})" if stage_a["shortest_leads"] else ""
    return f"{labelled(final['final_verdict'], final)}{leads}: {final['rule']}"


def _size(store: str) -> str:
    """`(N files, X MiB)` for a store on disk (an object store's size is its bucket's to tell)."""
    from pathlib import Path

    root = Path(store)
    if "://" in str(store) or not root.is_dir():
        return ""
    sizes = [p.stat().st_size for p in root.rglob("*") if p.is_file()]
    return f" ({len(sizes):,} files, {sum(sizes) / 2**20:,.1f} MiB)"


def summary(outcomes: list, stages: list, store: str) -> int:
    failed = [o for o in outcomes if not o.ok]
    checks = [c for o in outcomes for c in o.checks]
    skipped = sum(o.skipped for o in outcomes)
    print(f"apsft run: {len(outcomes) - len(failed)}/{len(stages)} stages succeeded"
          + (f" ({skipped} with nothing to run)" if skipped else "")
          + f" in {sum(o.seconds for o in outcomes):.0f} s; checks {sum(p for *_, p in checks)}/{len(checks)} passed"
          + (f" ({recorded} failed, recorded)" if (recorded := sum(len(o.recorded) for o in outcomes)) else ""))
    for outcome in outcomes:  # failed WARN checks, each with its description: the run went on
        for asset, name in outcome.recorded:
            print(f"  {asset}:{name} failed ({outcome.notes.get(f'{asset}:{name}', 'recorded; the run went on')})")
    for outcome in failed:
        print(f"  FAILED {outcome.job} (runs {', '.join(outcome.run_ids)})")
        for asset, name, passed in outcome.checks:
            if not passed and (asset, name) not in outcome.recorded:
                note = outcome.notes.get(f"{asset}:{name}")
                print(f"    check {asset}:{name} failed" + (f": {note}" if note else ""))
    alerts = [a for o in outcomes for a in o.alerts]
    if alerts:
        from apsft_dagster.core.alerts import alert_path

        print(f"  {len(alerts)} alert(s) written to {alert_path()}")
    print(f"  store: {store}{_size(store)}")
    _verdict(store, failed)
    if failed:
        print(f"  next: inspect the failed run in `apsft ui`; fix, then `apsft run --from {failed[0].job}`")
    else:
        print("  next: `apsft audit` (SQL audits of selection and fallbacks), `apsft ui` (every asset, check and run)")
    return 1 if failed else 0
