import sys
from pathlib import Path

import dagster as dg
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # tests import their own helpers (solvers.py)


def variant_config(tmp_path, edit, base: str = "smoke") -> Path:
    """A copy of a profile with `edit(raw_dict)` applied, written to tmp_path/variant.yaml."""
    import yaml

    from apsft_dagster.core.config import CONFIG_DIR

    raw = yaml.safe_load((CONFIG_DIR / f"{base}.yaml").read_text())
    edit(raw)
    path = Path(tmp_path) / "variant.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def smoke_resources(store_dir, **experiment_fields):
    from apsft_dagster.resources import ExperimentResource, GenerationResource, ScoringResource

    experiment = ExperimentResource(profile="smoke", store_dir=str(store_dir), **experiment_fields)
    return {"experiment": experiment, "generator": GenerationResource(experiment=experiment),
            "scorer": ScoringResource(experiment=experiment)}


@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    """The smoke profile materialized in-process, stage by stage, into one store (done once)."""
    from apsft_dagster.assets.audits import audit_assets
    from apsft_dagster.assets.base_model import base_model
    from apsft_dagster.assets.evidence_seal import evidence_seal
    from apsft_dagster.assets.r1_labels import r1_labels, r1_labels_index
    from apsft_dagster.assets.score_bank import parity_gate, score_bank, score_bank_index
    from apsft_dagster.assets.sft_arms import arm_partitions, sft_arms, sft_manifest
    from apsft_dagster.assets.task_catalog import task_catalog
    from apsft_dagster.assets.trace_bank import trace_bank, trace_bank_index
    from apsft_dagster.core.store import Store
    from apsft_dagster.partitions import single_run_tags, train_task_partitions

    store_dir = tmp_path_factory.mktemp("smoke_store")
    resources = smoke_resources(store_dir)
    every_task = single_run_tags(train_task_partitions.get_partition_keys())
    stages = {"tasks_and_model": ([task_catalog, base_model], None), "trace_bank": ([trace_bank], every_task),
              "trace_bank_index": ([trace_bank_index], None), "parity_gate": ([parity_gate], None),
              "score_bank": ([score_bank], every_task), "score_bank_index": ([score_bank_index], None),
              "r1_labels": ([r1_labels], every_task), "r1_labels_index": ([r1_labels_index], None),
              "evidence_seal": ([evidence_seal], None),
              "sft_arms": ([sft_arms], single_run_tags(arm_partitions.get_partition_keys())),
              "sft_manifest_and_audits": ([sft_manifest, *audit_assets], None)}
    results = {name: dg.materialize(assets, resources=resources, tags=tags) for name, (assets, tags) in stages.items()}
    return results, Store(store_dir)
