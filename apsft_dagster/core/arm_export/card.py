"""What describes an exported arm to its readers: the Hugging Face features and `dataset_info.json`,
the dataset card (README.md: YAML configs, each arm's rule, counts, seal and config digest), and
LLaMA-Factory's `dataset_info.json` for the messages files."""

from __future__ import annotations

import polars as pl
import yaml

from apsft_dagster.core.selection.arms import ARM, ArmSpec

SPLIT = "train"
# polars dtype -> the Hugging Face `Value` dtype of the same Arrow type
HF_DTYPES = {pl.String: "string", pl.Int64: "int64", pl.Int32: "int32", pl.Int8: "int8", pl.Float32: "float32"}


def shard_name(arm: str) -> str:
    return f"{arm}/{SPLIT}-00000-of-00001.parquet"


def rule_text(spec: ArmSpec) -> str:
    """The arm's row rule (core/selection/arms.py, rules.py) in one sentence."""
    match spec.rows:
        case "potential":
            return (f"per retained task, the best trace by `{spec.score}` and the most structurally distant trace "
                    "in the band of its top k (else the second best)")
        case "random":
            return (f"per `{spec.matched_to}` row, an eligible trace of the same task nearest its length, not "
                    f"picked by `{spec.matched_to}`")
        case "success":
            return (f"R1-successful traces nearest each `{spec.matched_to}` row's length, as many rows as "
                    f"`{spec.matched_to}` (balanced in total, not per cell)")
        case "shortest":
            return "per retained task, its two shortest eligible traces"
        case "shuffle":
            return (f"`{spec.matched_to}`'s thoughts moved to other tasks of the same (family, level) cell, "
                    "matched by length; prompt and answer are the target task's")
    return f"rule `{spec.rows}`"


def json_feature(dtype: pl.DataType) -> dict:
    """A column's feature as `DatasetInfo.to_dict` writes it."""
    if isinstance(dtype, pl.List):
        return {"feature": json_feature(dtype.inner), "_type": "List"}
    if isinstance(dtype, pl.Struct):
        return {f.name: json_feature(f.dtype) for f in dtype.fields}
    return {"dtype": HF_DTYPES[dtype.base_type()], "_type": "Value"}


def yaml_feature(name: str, dtype: pl.DataType) -> dict:
    """A column's feature as a dataset card's YAML writes it."""
    if isinstance(dtype, pl.List):
        inner = dtype.inner
        if isinstance(inner, pl.Struct):
            return {"name": name, "list": [yaml_feature(f.name, f.dtype) for f in inner.fields]}
        return {"name": name, "list": HF_DTYPES[inner.base_type()]}
    return {"name": name, "dtype": HF_DTYPES[dtype.base_type()]}


def dataset_info(arm: str, schema: pl.Schema, rows: int) -> dict:
    """An arm's `dataset_info.json` (the shape `datasets.DatasetInfo.from_directory` reads)."""
    return {"builder_name": "parquet", "config_name": arm, "dataset_name": "apsft_sft_arms",
            "description": f"{arm} ({ARM[arm].role}): {rule_text(ARM[arm])}",
            "features": {name: json_feature(dtype) for name, dtype in schema.items()},
            "splits": {SPLIT: {"name": SPLIT, "num_examples": rows, "dataset_name": "apsft_sft_arms"}}}


def llama_factory_info(arms: list[str]) -> dict:
    """LLaMA-Factory's dataset_info.json: each arm's messages file, read in its sharegpt (OpenAI roles) form."""
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
    return {arm: {"file_name": f"{arm}.jsonl", "formatting": "sharegpt", "columns": {"messages": "messages"},
                  "tags": tags} for arm in arms}


def dataset_card(provenance: dict, schemas: dict[str, pl.Schema], entries: dict[str, dict]) -> str:
    """README.md: the YAML the `datasets` loader reads (one config per arm), then the card."""
    header = {"configs": [{"config_name": arm, "data_files": [{"split": SPLIT, "path": shard_name(arm)}]}
                          for arm in schemas],
              "dataset_info": [{"config_name": arm, "features": [yaml_feature(n, d) for n, d in schema.items()]}
                               for arm, schema in schemas.items()]}
    weights = provenance["loss_weights"]
    lines = [
        "---", yaml.safe_dump(header, sort_keys=False, width=120).rstrip("\n"), "---", "",
        f"# apsft SFT arms ({provenance['profile']})", "",
        "The six SFT datasets of an apsft experiment (docs/PROTOCOL.md §9), exported by `apsft export-arms "
        "--format datasets` from a store whose evidence seal and SFT manifest verified.", "",
        f"- config digest: `{provenance['config_digest']}`",
        f"- evidence seal SHA-256: `{provenance['evidence_seal_sha256']}`",
        f"- SFT manifest SHA-256: `{provenance['sft_manifest_sha256']}`",
        f"- base model fingerprint (the tokenizer of `input_ids`): `{provenance['base_model_fingerprint']}`",
        f"- loss weights: prompt {weights['prompt']}, thought {weights['thought']}, boundary + answer + end of turn "
        f"{weights['answer']}; apsft trains on the first {provenance['max_length']} tokens of a record", "",
        "Columns: `messages` (user prompt, assistant turn as the training record holds it), `input_ids` (the "
        "record, tokenized once), `loss_weights` (per token), `completion_mask` (1 where the weight is above 0, "
        "TRL's convention), and the row's provenance. How TRL, axolotl and LLaMA-Factory read them: "
        "docs/export-arms.md.", "",
        "| config | role | rule | rows | tasks | cells | unique sources | rows over max length | arm file SHA-256 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, e in entries.items():
        lines.append(f"| `{arm}` | {ARM[arm].role} | {rule_text(ARM[arm])} | {e['rows']} | {e['tasks']} | "
                     f"{e['cells']} | {e['unique_sources']} | {e['truncated_rows']} | `{e['sha256']}` |")
    first = next(iter(schemas))
    lines += ["", "```python", "from datasets import load_dataset", "",
              f'arm = load_dataset("path/to/this/folder", "{first}", split="{SPLIT}")', "```", ""]
    return "\n".join(lines)
