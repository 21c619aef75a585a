"""The loss-mask curation's store names and SQL views (the experiment's are in core/layout.py)."""

GROUP = "loss_mask"  # the wing's asset group

# one folder per registered dataset version
LOSS_MASK = "loss_mask"


def lm_file(dataset: str, name: str) -> str:
    """`source.json` (the registration), `census.json` / `census.parquet`, `build` (a folder: the
    masked JSON lines and the flags), `build.json`, `verify.json`, `packs` and `base_packs`
    (folders of Parquet shards), `pack.json`, `base_pack.json`, `comparison.json`."""
    return f"{LOSS_MASK}/{dataset}/{name}"


MASKED, FLAGS = "masked.jsonl", "flags.jsonl"  # the build folder's two files

# view -> (the asset that writes its files, the files, the view's SELECT over `{files}`): every
# registered dataset's census, long (dataset, source, kind, name, count)
VIEWS = {"lm_census": ("lm_census", lm_file("*", "census.parquet"), "select * from read_parquet({files})")}
