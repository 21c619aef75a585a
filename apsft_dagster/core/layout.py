"""Every name in the artifact store, once: what each stage writes, relative to the store root.

Assets, the seal, amendment classification, the SQL views and the CLI all read these names;
nothing else spells a store path. Folders named here for stages still to come (adapters, merged
models, evaluation, Stage B, the report) are the places those stages write to.
"""

from __future__ import annotations

# tasks and model
TASK_CATALOG = "task_catalog.parquet"
BASE_MODEL_DIR = "base_model"  # the embedded model's directory artifact (smoke)
BASE_MODEL_REPORT = "base_model.json"  # source, path and fingerprint of the base model (sealed)

# evidence: per-task banks of shards, each with an index
TRACE_BANK = "trace_bank"
SCORE_BANK = "score_bank"
R1_BANK = "r1_labels"
PARITY_GATE = "parity_gate.json"
AMENDMENT_LOG = "amendments.jsonl"
EVIDENCE_SEAL = "evidence_seal.json"
SEALED_CONFIG = "evidence_seal_config.json"  # the config body whose digest the seal binds (`apsft compare` reads it)
DESIGN_ANCHOR = "design_anchor.json"  # `apsft freeze`: the design before the harvest (core/anchor.py)
REVIEW_LOG = "reviews.jsonl"  # the review points' pauses and resumes (core/review.py)

# selection
SFT_ARMS = "sft_arms"
SFT_MANIFEST = "sft_manifest.json"
AUDIT_DATABASE = "audits.duckdb"
GENERATION_AUDIT = "generation_audit.parquet"  # degeneration signals of our own traces and completions
GENERATION_AUDIT_INPUTS = "generation_audit.inputs.json"  # what it was computed from (a rerun keeps it)

# training, evaluation and the verdict (written by the stages that follow selection)
ADAPTERS = "adapters"
MERGED_MODELS = "merged_models"
DEPLOYMENT_PROBE = "deployment_probe"
STAGE_A_EVAL = "stage_a_eval"
STAGE_A_ANALYSIS = "stage_a_analysis"
STAGE_B_EVAL = "stage_b_eval"
STAGE_B_ANALYSIS = "stage_b_analysis"
REPORT = "report"

# Evidence assets (store folders or top-level artifacts) -> the stage of evidence they are. The
# parity gate scores calibration traces, so it is score evidence; amendments are classified by it.
EVIDENCE_STAGES = {
    TRACE_BANK: "trace", PARITY_GATE: "score", SCORE_BANK: "score", R1_BANK: "rollout",
    STAGE_A_EVAL: "outcome", STAGE_A_ANALYSIS: "outcome", STAGE_B_EVAL: "outcome", STAGE_B_ANALYSIS: "outcome",
}


def shard_file(bank: str, task_id: str) -> str:
    return f"{bank}/shards/{task_id}.parquet"


def key_file(bank: str, task_id: str) -> str:
    """What made a shard (core/bank_keys.py), written before the shard."""
    return f"{bank}/keys/{task_id}.json"


def shards_glob(bank: str) -> str:
    return f"{bank}/shards/*.parquet"


def index_file(bank: str) -> str:
    return f"{bank}/index.json"


def summary_file(bank: str) -> str:
    return f"{bank}/summary.json"


def arm_file(arm: str) -> str:
    """An arm's training records: gzip JSON lines."""
    return f"{SFT_ARMS}/{arm}.jsonl.gz"


def arm_rows(arm: str) -> str:
    """An arm's rows without texts (provenance for the SQL audits)."""
    return f"{SFT_ARMS}/{arm}.rows.parquet"


def adapter_dir(policy: str) -> str:
    """A policy's LoRA adapter (directory artifact: adapter_model.safetensors, adapter_config.json)."""
    return f"{ADAPTERS}/{policy}"


def adapter_report(policy: str) -> str:
    """Training's receipt for a policy: steps, digests, loss curve; written last."""
    return f"{ADAPTERS}/{policy}.json"


def adapter_checkpoint(policy: str) -> str:
    return f"{ADAPTERS}/checkpoints/{policy}"


def loss_curve(policy: str) -> str:
    return f"{ADAPTERS}/{policy}.loss.png"


def merged_dir(policy: str) -> str:
    return f"{MERGED_MODELS}/{policy}"


def merged_report(policy: str) -> str:
    """The merge's receipt: pair counts, weights used, every deployed file's SHA-256; written last."""
    return f"{MERGED_MODELS}/{policy}.json"


def probe_report(policy: str) -> str:
    return f"{DEPLOYMENT_PROBE}/{policy}.json"


def eval_generations(policy: str) -> str:
    """A policy's raw greedy generations on the Stage A splits, keyed for reuse."""
    return f"{STAGE_A_EVAL}/generations/{policy}.parquet"


def eval_table(policy: str) -> str:
    """A policy's parsed Stage A evaluation: one row per task."""
    return f"{STAGE_A_EVAL}/{policy}.parquet"


def stage_b_generations(policy: str) -> str:
    """A policy's raw greedy generations on the Stage B splits (Stage A's rows reused by key)."""
    return f"{STAGE_B_EVAL}/generations/{policy}.parquet"


def stage_b_samples(policy: str) -> str:
    """A sampled policy's raw k samples per Stage B task."""
    return f"{STAGE_B_EVAL}/samples/{policy}.parquet"


def stage_b_table(policy: str) -> str:
    """A policy's parsed Stage B greedy evaluation: one row per task."""
    return f"{STAGE_B_EVAL}/{policy}.parquet"


def stage_b_sample_table(policy: str) -> str:
    """A sampled policy's parsed samples: one row per (task, sample)."""
    return f"{STAGE_B_EVAL}/{policy}.samples.parquet"


STAGE_A_DECISION = f"{STAGE_A_ANALYSIS}/analysis.json"
STAGE_B_DECISION = f"{STAGE_B_ANALYSIS}/analysis.json"
STAGE_B_PLAN = f"{STAGE_B_ANALYSIS}/plan.json"
REPORT_MARKDOWN = f"{REPORT}/report.md"


def report_plot(name: str) -> str:
    return f"{REPORT}/{name}.png"
