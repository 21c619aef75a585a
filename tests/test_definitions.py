import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.paths import PROJECT_ROOT
from apsft_dagster.core.selection.arms import ARMS
from apsft_dagster.core.tasks.catalog import train_task_ids
from apsft_dagster.definitions import defs
from apsft_dagster.experiment.partitions import train_task_partitions

SNAPSHOT = Path(__file__).parent / "snapshots" / "asset_graph.json"


def _graph_snapshot() -> dict:
    """Asset keys, groups, kinds, deps, partitions and checks: an accidental graph change shows here."""
    graph = defs.resolve_asset_graph()
    assets = {}
    for spec in sorted(defs.resolve_all_asset_specs(), key=lambda s: s.key.to_user_string()):
        key = spec.key.to_user_string()
        assets[key] = {
            "group": spec.group_name,
            "kinds": sorted(spec.kinds),
            "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
            "partitions": type(spec.partitions_def).__name__ if spec.partitions_def else None,
            "checks": sorted(k.name for k in graph.asset_check_keys if k.asset_key == spec.key),
        }
    return {"assets": assets,
            "jobs": sorted(j.name for j in defs.resolve_all_job_defs() if not j.name.startswith("__"))}


def test_asset_graph_matches_snapshot():
    snapshot = _graph_snapshot()
    if os.environ.get("APSFT_UPDATE_SNAPSHOTS"):
        SNAPSHOT.write_text(json.dumps(snapshot, indent=1, sort_keys=True) + "\n")
    assert snapshot == json.loads(SNAPSHOT.read_text())


def test_definitions_load_with_resources_and_the_stage_jobs():
    from apsft_dagster.experiment.stages import STAGES

    assert [s.job for s in STAGES] == ["tasks_and_model_job", "trace_bank_job", "bank_and_parity_job",
                                            "score_bank_job", "score_bank_index_job", "r1_labels_job",
                                            "r1_labels_index_job", "evidence_seal_job", "sft_arms_job",
                                            "sft_manifest_and_audits_job", "adapters_job", "merged_models_job",
                                            "stage_a_generations_job", "stage_a_eval_job", "stage_a_analysis_job",
                                            "replication_adapters_job", "replication_merged_models_job",
                                            "stage_b_generations_job", "stage_b_eval_job", "verdict_and_report_job"]
    assert defs.resolve_job_def("trace_bank_job").partitions_def == train_task_partitions
    assert defs.resolve_job_def("sft_arms_job").partitions_def.get_partition_keys() == list(ARMS)
    assert sorted(s.name for s in defs.sensors) == ["asset_check_alert_sensor", "rl_inbox_sensor",
                                                    "run_failure_alert_sensor"]
    assert defs.resolve_job_def("tasks_and_model_job").partitions_def is None
    assert {"experiment", "generator"} <= set(defs.resources)
    assert isinstance(defs.resources["generator"], dg.ConfigurableResource)
    # the stages that hold an engine are the ones a GPU run isolates in their own process
    assert [s.job for s in STAGES if s.engine] == ["trace_bank_job", "bank_and_parity_job", "score_bank_job",
                                                   "r1_labels_job", "adapters_job", "merged_models_job",
                                                   "stage_a_generations_job", "replication_adapters_job",
                                                   "replication_merged_models_job", "stage_b_generations_job"]
    # partitions and resources come from one config: the resource is bound to the definitions' digest
    assert defs.resources["experiment"].definitions_digest == load_config().digest


def test_train_partitions_are_sorted_task_ids_with_contiguous_cells():
    config = load_config()
    keys = train_task_partitions.get_partition_keys()
    assert keys == train_task_ids(config) == sorted(keys)
    assert len(keys) == config.tasks.train.total
    cells = [k.rsplit("-", 1)[0] for k in keys]  # "caravan-L1-000" -> "caravan-L1"
    runs = [c for i, c in enumerate(cells) if i == 0 or cells[i - 1] != c]
    assert len(runs) == len(set(cells)) == 9  # each cell is one contiguous block
    assert all(cells.count(c) == config.tasks.train.per_cell for c in set(cells))


@pytest.mark.slow
def test_dagster_loads_the_code_location_as_the_ui_does():
    """Dagster's own loader (what `dagster dev`, the code server and the UI use) takes one
    Definitions object from the module's scope: the wings' are reached through their modules."""
    proc = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Validation successful for code location apsft_dagster.definitions" in proc.stderr + proc.stdout
