"""`apsft`: run a profile end to end, open the UI, or validate a config.

The config is validated before Dagster or torch is imported, so a bad profile fails in well
under two seconds and writes nothing.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from apsft_dagster.core.config import PROJECT_ROOT, load_config
from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.paths import ensure_dagster_home


def _export(args: argparse.Namespace) -> None:
    """Hand the choice to the definitions (partitions are derived from the config at load)."""
    if args.config:
        os.environ["APSFT_CONFIG"] = str(os.path.abspath(args.config))
    elif args.profile:
        os.environ["APSFT_PROFILE"] = args.profile
        os.environ.pop("APSFT_CONFIG", None)
    if getattr(args, "store", None):
        from apsft_dagster.core.object_store import is_object_url

        os.environ["APSFT_STORE_DIR"] = args.store if is_object_url(args.store) else os.path.abspath(args.store)


def run(args: argparse.Namespace) -> int:
    """Preflight every stage about to run, then run them in order through the stage runner."""
    config = load_config(args.profile, args.config)
    _export(args)
    if not args.verbose:  # Hugging Face's per-load progress bars; the stages' own progress stays
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    from apsft_dagster.core.engines.lifetime import require_device
    from apsft_dagster.core.paths import store_root
    from apsft_dagster.runner import check_partition_keys, run_stages, select_stages

    try:
        stages = select_stages(args.start, args.stop)
        keys = _partition_keys(args.partitions, {s.job for s in stages})
        check_partition_keys(stages, keys)
    except ValueError as exc:
        print(f"apsft: {exc}", file=sys.stderr)
        return 2
    for stage in stages:  # before anything is written: a missing device stops the whole run here
        if stage.engine:
            require_device(config.compute, stage.job, config.profile)
    store = args.store or str(store_root(config.profile))
    print(f"apsft run: profile {config.profile} (config {config.digest[:12]}), {config.compute.device} "
          f"{config.compute.dtype}, store {store}", flush=True)
    ensure_dagster_home()
    import dagster as dg

    from apsft_dagster.definitions import defs
    from apsft_dagster.runner import workspace_origin

    gpu = config.compute.device == "cuda"
    outcomes = run_stages(defs, dg.DagsterInstance.get(), stages, partition_keys=keys, verbose=args.verbose,
                          isolate=lambda stage: gpu and stage.engine, origin=workspace_origin(),
                          on_stage=_print_stage)
    return _summary(outcomes, stages, store)


def _partition_keys(specs: list[str] | None, jobs: set[str]) -> dict[str, list[str]]:
    """`--partitions JOB=KEY,KEY` (repeatable) -> {job: keys}."""
    keys: dict[str, list[str]] = {}
    for spec in specs or []:
        job, _, listed = spec.partition("=")
        if job not in jobs or not listed:
            raise ValueError(f"--partitions {spec!r}: use JOB=KEY[,KEY...] with a stage about to run "
                             f"({', '.join(sorted(jobs))})")
        keys.setdefault(job, []).extend(k for k in listed.split(",") if k)
    return keys


def _print_stage(outcome) -> None:
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
    print(f"  {outcome.job:<30} {status:<6} {outcome.seconds:7.1f} s  {checks:<13} {'; '.join(figures)}", flush=True)


def _short(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _verdict(store: str, failed: list) -> None:
    """After a run that reached the end: the verdict and where the report is."""
    from apsft_dagster.core.layout import REPORT_MARKDOWN
    from apsft_dagster.core.object_store import open_store

    s = open_store(store)
    if not failed and (line := _verdict_line(s)):
        print(f"  verdict: {line}")
        print(f"  report: {s.path(REPORT_MARKDOWN)}")


def _verdict_line(store) -> str | None:
    """The final verdict, SHORTEST_BANKING_LEADS beside it, and the rule that fired."""
    from apsft_dagster.core.layout import REPORT_MARKDOWN, STAGE_A_DECISION, STAGE_B_DECISION

    if not all(store.exists(n) for n in (REPORT_MARKDOWN, STAGE_A_DECISION, STAGE_B_DECISION)):
        return None
    final, stage_a = store.get_json(STAGE_B_DECISION), store.get_json(STAGE_A_DECISION)["decision"]
    leads = " (SHORTEST_BANKING_LEADS)" if stage_a["shortest_leads"] else ""
    return f"{final['final_verdict']}{leads}: {final['rule']}"


def _summary(outcomes: list, stages: list, store: str) -> int:
    failed = [o for o in outcomes if not o.ok]
    checks = [c for o in outcomes for c in o.checks]
    skipped = sum(o.skipped for o in outcomes)
    print(f"apsft run: {len(outcomes) - len(failed)}/{len(stages)} stages succeeded"
          + (f" ({skipped} with nothing to run)" if skipped else "")
          + f" in {sum(o.seconds for o in outcomes):.0f} s; checks {sum(p for *_, p in checks)}/{len(checks)} passed")
    for outcome in failed:
        print(f"  FAILED {outcome.job} (runs {', '.join(outcome.run_ids)})")
        for asset, name, passed in outcome.checks:
            if not passed:
                print(f"    check {asset}:{name} failed")
    alerts = [a for o in outcomes for a in o.alerts]
    if alerts:
        from apsft_dagster.core.alerts import alert_path

        print(f"  {len(alerts)} alert(s) written to {alert_path()}")
    print(f"  store: {store}")
    _verdict(store, failed)
    if failed:
        print(f"  next: inspect the failed run in `apsft ui`; fix, then `apsft run --from {failed[0].job}`")
    else:
        print("  next: `apsft audit` (SQL audits of selection and fallbacks), `apsft ui` (every asset, check and run)")
    return 1 if failed else 0


def ui(args: argparse.Namespace) -> int:
    _export(args)
    ensure_dagster_home()
    cmd = [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", args.host, "-p", str(args.port)]
    proc = subprocess.Popen(cmd, cwd=PROJECT_ROOT, start_new_session=True)  # its own group, so we can end it all
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return proc.wait()
    except KeyboardInterrupt:
        return _stop(proc)


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _stop(proc: subprocess.Popen, grace_s: float = 20.0) -> int:
    """Interrupt dagster dev; its daemon can hang on shutdown (dagster-io/dagster#3757), so after
    a grace period kill the whole process group (webserver, daemon, code servers)."""
    os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        print(f"apsft: dagster dev did not stop within {grace_s:.0f} s; killing its processes", file=sys.stderr)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return 130


def export_bank(args: argparse.Namespace) -> int:
    """Write the trace bank as an inheritable bank (index.json + shards) and print its digest."""
    from apsft_dagster.core.bank import export_bank as export
    from apsft_dagster.core.layout import TRACE_BANK, shard_file
    from apsft_dagster.core.tasks.splits import train_task_ids

    config, store = _store(args)
    task_ids = [t for t in train_task_ids(config) if store.exists(shard_file(TRACE_BANK, t))]
    digest = export(store, TRACE_BANK, task_ids, args.out)
    print(f"exported {len(task_ids)} task shards to {args.out}")
    print(f"harvest.inherited_index: {os.path.abspath(args.out)}/index.json")
    print(f"harvest.inherited_index_sha256: {digest}")
    return 0


def profile_arguments(p: argparse.ArgumentParser, store: bool = True) -> None:
    p.add_argument("--profile", help="configs/<profile>.yaml (default: $APSFT_PROFILE or smoke)")
    p.add_argument("--config", help="path to a profile YAML (wins over --profile)")
    if store:
        p.add_argument("--store", help="artifact store root (default: .apsft/store/<profile>)")


def run_partition(stages, partitions: str, key: str, on_stage=lambda outcome: None) -> bool:
    """A sibling group's stages for one dynamic partition (added to the instance if new, so the UI
    lists it); False, after saying where it stopped, when a run or a check failed."""
    import dagster as dg

    from apsft_dagster.definitions import defs
    from apsft_dagster.runner import run_stages

    ensure_dagster_home()
    instance = dg.DagsterInstance.get()
    instance.add_dynamic_partitions(partitions, [key])  # a key already there is left as it is
    keys = {s.job: [key] for s in stages if isinstance(s.partitions_def, dg.DynamicPartitionsDefinition)}
    outcomes = run_stages(defs, instance, stages, partition_keys=keys, on_stage=on_stage)
    if not all(o.ok for o in outcomes):
        print(f"apsft: {key} stopped at {outcomes[-1].job}; `apsft ui` shows the failed run or check", file=sys.stderr)
        return False
    return True


def _store(args: argparse.Namespace):
    from apsft_dagster.core.paths import store_root
    from apsft_dagster.core.object_store import open_store

    config = load_config(args.profile, args.config)
    return config, open_store(args.store or store_root(config.profile))


def amend(args: argparse.Namespace) -> int:
    """Record an amendment; its class follows from the evidence already in the store."""
    from apsft_dagster.core.amendments import record_amendment

    _, store = _store(args)
    record = record_amendment(store, args.text, args.date, budget_device_hours=args.budget_device_hours)
    print(f"amendment {record['seq']} ({record['date']}): {record['classification']}")
    print(f"evidence at recording: {record['evidence']}")
    if "budget_device_hours" in record:
        print(f"training budget: {record['budget_device_hours']} device-hours" + (
            "" if record["selection"] else " (no sft_manifest yet: the budget gate honours a budget only when it "
                                           "was recorded after the manifest it applies to)"))
    print("reseal (materialize evidence_seal) before selection: the seal binds the amendment log")
    return 0


def audit(args: argparse.Namespace) -> int:
    """Run the SQL audits over the store, print them, and keep them in audits.duckdb."""
    import polars as pl

    from apsft_dagster.core.audits import discover, persist, run_audit
    from apsft_dagster.core.errors import MissingArtifactError

    _, store = _store(args)
    audits = discover()
    chosen = [a for a in audits if args.name in (None, a.name)]
    if not chosen:
        print(f"apsft: no audit {args.name!r}; known: {', '.join(a.name for a in audits)}", file=sys.stderr)
        return 2
    results = {}
    with pl.Config(tbl_rows=200, tbl_cols=20, tbl_width_chars=160, tbl_hide_dataframe_shape=True):
        for a in chosen:
            try:
                results[a.name] = run_audit(a, store)
            except MissingArtifactError as exc:
                if args.name:  # asked for by name: its missing input is an error
                    raise
                print(f"\n== {a.name}: skipped ({exc})")
                continue
            print(f"\n== {a.name} ({a.path.name}): {a.description}\n{results[a.name]}")
    print(f"\nkept in {persist(store, results)}")
    return 0


def report(args: argparse.Namespace) -> int:
    """Where the experiment report is, and the verdict it states."""
    from apsft_dagster.core.layout import REPORT_MARKDOWN

    _, store = _store(args)
    if not store.exists(REPORT_MARKDOWN):
        print(f"apsft: no report yet in {store.root}; run `apsft run` (or `apsft run --from stage_a_analysis_job`)",
              file=sys.stderr)
        return 2
    store.verify(REPORT_MARKDOWN)
    print(f"verdict: {_verdict_line(store)}")
    print(f"report: {store.path(REPORT_MARKDOWN)}")
    return 0


def validate(args: argparse.Namespace) -> int:
    config = load_config(args.profile, args.config)
    print(f"{config.profile}: valid, digest {config.digest}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="apsft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler, text in (("run", run, "materialize every stage, in order"), ("ui", ui, "serve the Dagster UI"),
                                ("validate", validate, "validate a profile and print its digest"),
                                ("export-bank", export_bank, "export the trace bank as an inheritable bank"),
                                ("amend", amend, "record a dated amendment or deviation (classified automatically)"),
                                ("audit", audit, "run the SQL audits in dbt_like_sql/ and print them"),
                                ("report", report, "print the experiment report's path and its verdict")):
        p = sub.add_parser(name, help=text)
        profile_arguments(p, store=name in ("run", "export-bank", "amend", "audit", "report"))
        p.set_defaults(handler=handler)
        if name == "export-bank":
            p.add_argument("--out", required=True, help="folder to write index.json and shards/ into")
        if name == "run":
            p.add_argument("--from", dest="start", metavar="STAGE",
                           help="start at this stage job (earlier stages' artifacts must exist)")
            p.add_argument("--to", dest="stop", metavar="STAGE", help="stop after this stage job")
            p.add_argument("--partitions", action="append", metavar="JOB=KEY[,KEY...]",
                           help="run only these partitions of a partitioned stage (repeatable)")
            p.add_argument("--verbose", action="store_true", help="show Dagster's own log (debug level)")
        if name == "amend":
            p.add_argument("text", help="what changes and why")
            p.add_argument("--date", help="YYYY-MM-DD (default: today, UTC)")
            p.add_argument("--budget-device-hours", type=float, metavar="H",
                           help="the training budget this amendment sets (see the budget gate)")
        if name == "audit":
            p.add_argument("name", nargs="?", help="one audit (a dbt_like_sql/ file name without .sql)")
        if name == "ui":
            p.add_argument("--port", type=int, default=3000)
            p.add_argument("--host", default="127.0.0.1",
                           help="address to bind (default 127.0.0.1: this machine only; Dagster OSS has no login, "
                                "so share it through an authenticating proxy, not by binding 0.0.0.0)")
    from apsft_dagster import cli_loss_mask, cli_run_report

    cli_loss_mask.add_parser(sub)
    cli_run_report.add_parser(sub)
    args = parser.parse_args(argv)
    try:
        return args.handler(args)
    except ApsftError as exc:
        print(f"apsft: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
