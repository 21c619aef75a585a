"""`apsft loss-mask`: register a dataset version, run the loss-mask group on it, or run the demo.

  apsft loss-mask add NAME PATH [--format F] [--flags FILE] [--tokenizer DIR] [--chat-template FILE]
                                  register PATH (JSON lines in a chat format, a Parquet file or a
                                  datasets folder, staged) as dataset version NAME (a partition)
  apsft loss-mask run NAME        census -> build -> verify -> pack -> comparison, then the SQL audits
  apsft loss-mask demo            generate the planted dataset (`loss_mask.demo_rows`), register it
                                  as `demo` and run the group on it
"""

from __future__ import annotations

import argparse
import sys

from apsft_dagster.cli.args import export_choice, profile_arguments, profile_store, store_location


def add_parser(sub) -> None:
    p = sub.add_parser("loss-mask", help="the loss-mask curation group: add, run, demo")
    p.add_argument("action", choices=("add", "run", "demo"))
    p.add_argument("name", nargs="?", help="dataset version (add, run)")
    p.add_argument("path", nargs="?", help="JSON-lines file, Parquet file or datasets save_to_disk folder (add)")
    p.add_argument("--format", dest="fmt", choices=("native", "openai", "sharegpt"),
                   help="the rows' chat format (add; default: detected from the first rows)")
    p.add_argument("--flags", help="build from this flags file (JSON lines) instead of the rules (add)")
    p.add_argument("--tokenizer", help="tokenizer folder the pack uses instead of the base model's (add)")
    p.add_argument("--chat-template", dest="chat_template", help="Jinja chat template file for the pack (add)")
    profile_arguments(p)
    p.set_defaults(handler=loss_mask)


def loss_mask(args: argparse.Namespace) -> int:
    from apsft_dagster.core.loss_mask.datasets import check_name, register
    from apsft_dagster.core.loss_mask.settings import loss_mask_settings
    from apsft_dagster.loss_mask.partitions import LM_DATASET

    if (args.action in ("add", "run") and not args.name) or (args.action == "add" and not args.path):
        print(f"apsft loss-mask {args.action}: needs NAME" + (" PATH" if args.action == "add" else ""), file=sys.stderr)
        return 2
    config, store = profile_store(args)
    loss_mask_settings(config)  # a profile without the section is refused before anything is written
    chosen = export_choice(args)
    if args.action == "add":
        record = register(store, args.name, args.path, fmt=args.fmt, flags=args.flags, tokenizer=args.tokenizer,
                          chat_template=args.chat_template)
        _instance(config).add_dynamic_partitions(LM_DATASET, [record["name"]])  # listed in the UI until it is run
        print(f"registered {record['name']}: {record['path']} ({record['bytes']:,} bytes, "
              f"sha256 {record['sha256'][:12]}, format {record['format']})"
              + (f", staged from {record['staged_from']['path']}" if record.get("staged_from") else "")
              + (f", flags {record['flags']['path']}" if record.get("flags") else ""))
        return 0
    name = "demo" if args.action == "demo" else check_name(args.name)
    if args.action == "demo":
        _write_demo(store, config)
    return _run(store, config, name, chosen)


def _instance(config):
    import dagster as dg

    from apsft_dagster.core.paths import ensure_dagster_home, store_root

    ensure_dagster_home(store_root(config.profile))  # the store's own instance (--store is exported)
    return dg.DagsterInstance.get()


def _write_demo(store, config) -> None:
    from apsft_dagster.core.loss_mask.dataset import dataset_lines
    from apsft_dagster.core.loss_mask.datasets import register
    from apsft_dagster.core.loss_mask.names import lm_file
    from apsft_dagster.core.loss_mask.settings import loss_mask_settings

    name = lm_file("demo", "input.jsonl")
    store.put_bytes(name, b"".join(dataset_lines(loss_mask_settings(config).demo_rows, config.seeds.experiment)))
    record = register(store, "demo", store.path(name))
    print(f"demo dataset: {loss_mask_settings(config).demo_rows} planted rows -> {record['path']}")


def _run(store, config, name: str, chosen) -> int:
    from apsft_dagster.core.layout import BASE_MODEL_REPORT
    from apsft_dagster.core.loss_mask.datasets import registered
    from apsft_dagster.core.loss_mask.names import lm_file
    from apsft_dagster.experiment.stages import STAGES
    from apsft_dagster.loss_mask.partitions import LM_DATASET
    from apsft_dagster.loss_mask.stages import LOSS_MASK_STAGES
    from apsft_dagster.runner import run_wing_partition, select_stages

    record = registered(store, name)
    stages = list(LOSS_MASK_STAGES)
    # packing tokenizes with the base model's tokenizer unless the dataset names its own
    if not record.get("tokenizer") and not store.exists(BASE_MODEL_REPORT):
        stages = select_stages(STAGES, "tasks_and_model_job", "tasks_and_model_job") + stages  # the experiment's

    def line(o) -> None:
        print(f"  {o.job:<22} {'ok' if o.ok else 'FAILED':<7} {o.seconds:6.1f} s  "
              f"checks {sum(p for *_, p in o.checks)}/{len(o.checks)}", flush=True)

    if not run_wing_partition(stages, LM_DATASET, name, chosen, store_location(chosen, config), on_stage=line):
        return 1
    comparison = store.get_json(lm_file(name, "comparison.json"))
    print(f"{name}: census, build, verify, pack and comparison passed; packs in {store.path(lm_file(name, 'packs'))}")
    print(f"{'metric':<20}{'base':>14}{'masked':>14}{'delta':>12}")
    for row in comparison["table"]:
        shown = "{:.4%}" if row["metric"] == "efficiency" else "{:,}"
        cells = [shown.format(row[k]) for k in ("base", "masked", "delta")]
        print(f"{row['metric']:<20}{cells[0]:>14}{cells[1]:>14}{cells[2]:>12}")
    return 0
