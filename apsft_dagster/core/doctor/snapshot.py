"""A local model snapshot, checked as the loader needs it, before a GPU waits on it: config.json, the
tokenizer, every weight file the index names, each as long as its own safetensors header says (a
shard cut short by a failed copy shows here, not an hour into a run), and the revision.

`hf download NAME --revision REV --local-dir DIR` records each file it writes in
`DIR/.cache/huggingface/download/<file>.metadata` (huggingface_hub's `_local_folder.py`): the commit,
the etag (for an LFS file, its sha256), a timestamp, one a line. The recorded commit must be the
profile's `model.revision`; `hashes=True` also re-hashes every LFS file against its etag. Files
copied by hand carry no record: their revision cannot be verified (a warning). Standard library.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from apsft_dagster.core.doctor.check import FAILS, OK, SKIPPED, WARN, Check
from apsft_dagster.core.doctor.disk import gb

METADATA = Path(".cache") / "huggingface" / "download"
TOKENIZERS = (("tokenizer.json",), ("vocab.json", "merges.txt"))  # a fast tokenizer, or a BPE's two files
INDEX, SINGLE = "model.safetensors.index.json", "model.safetensors"
SHA256 = re.compile(r"[0-9a-f]{64}")
MAX_HEADER = 100_000_000  # bytes of a safetensors JSON header: far above any real one


def download_command(name: str, revision: str | None, folder: Path, root: Path) -> str:
    shown = folder.relative_to(root) if folder.is_relative_to(root) else folder
    return f"hf download {name} --revision {revision or '<revision>'} --local-dir {shown}"


def read_record(folder: Path, name: str) -> tuple[str, str] | None:
    """(commit, etag) that `hf download` recorded for a file, None without a record."""
    try:
        lines = (folder / METADATA / f"{name}.metadata").read_text().splitlines()
    except OSError:
        return None
    return (lines[0].strip(), lines[1].strip()) if len(lines) >= 2 else None


def weight_names(folder: Path) -> tuple[list[str], str]:
    """The weight files the loader will open (every shard the index names, or the one file), and a
    problem with the index itself ("" when none)."""
    if (folder / INDEX).is_file():
        try:
            names = sorted(set(json.loads((folder / INDEX).read_text())["weight_map"].values()))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            return [], f"{INDEX} is unreadable ({type(exc).__name__}: {exc})"
        return (names, "") if names else ([], f"{INDEX} names no shard")
    return ([SINGLE], "") if (folder / SINGLE).is_file() else ([], f"neither {INDEX} nor {SINGLE}")


def safetensors_problem(path: Path) -> str:
    """What is wrong with one weight file ("" when nothing): absent, cut short, or longer than its
    header says (8 bytes of header length, the JSON header, then the tensors up to the last offset)."""
    if not path.is_file():
        return "missing"
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 0 or length > MAX_HEADER:
            return f"not a safetensors file ({size} bytes)"
        if 8 + length > size:
            return f"truncated: {size} bytes, shorter than its own header ({8 + length})"
        try:
            tensors = json.loads(f.read(length))
            end = max([int(t["data_offsets"][1]) for k, t in tensors.items() if k != "__metadata__"] or [0])
        except (ValueError, KeyError, TypeError, IndexError, AttributeError):
            return "not a safetensors file (its header is not one)"
    expected = 8 + length + end
    if size != expected:
        return f"{'truncated' if size < expected else 'too long'}: {size} bytes, its header says {expected}"
    return ""


def files_check(folder: Path, fix: str) -> Check:
    missing = [] if (folder / "tokenizer_config.json").is_file() else ["tokenizer_config.json"]
    if not any(all((folder / n).is_file() for n in names) for names in TOKENIZERS):
        missing.append(" or ".join(" + ".join(names) for names in TOKENIZERS))
    if missing:
        return Check(FAILS, "snapshot files", f"{folder} lacks {', '.join(missing)}", fix)
    return Check(OK, "snapshot files", f"config.json and the tokenizer are in {folder}")


def weights_check(folder: Path, names: list[str], problem: str, fix: str) -> Check:
    if problem:
        return Check(FAILS, "snapshot weights", f"{folder}: {problem}", fix)
    bad = [f"{name} {why}" for name in names if (why := safetensors_problem(folder / name))]
    if bad:
        return Check(FAILS, "snapshot weights", "; ".join(bad), fix)
    total = sum((folder / name).stat().st_size for name in names)
    return Check(OK, "snapshot weights", f"{len(names)} safetensors file(s), {gb(total)}, each as long as its "
                                         "header says")


def revision_check(folder: Path, names: list[str], revision: str | None, fix: str) -> Check:
    """The commit `hf download` recorded for every file, against the profile's `model.revision`."""
    if not revision:
        return Check(WARN, "snapshot revision", "the profile names no model.revision: nothing to verify against")
    records = {name: read_record(folder, name) for name in names}
    if not any(records.values()):
        return Check(WARN, "snapshot revision", f"no `hf download` record in {folder / METADATA} (files copied by "
                                                f"hand?): cannot verify revision {revision}", fix)
    wrong = [f"{name} at {record[0]}" for name, record in records.items() if record and record[0] != revision]
    if wrong:
        return Check(FAILS, "snapshot revision", f"{'; '.join(wrong)}, not model.revision {revision}", fix)
    unrecorded = [name for name, record in records.items() if not record]
    if unrecorded:
        return Check(WARN, "snapshot revision", f"recorded at {revision}, but {', '.join(unrecorded)} carry no "
                                                "record (copied by hand?)", fix)
    return Check(OK, "snapshot revision", f"{len(names)} files recorded at {revision} by `hf download`")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hashes_check(folder: Path, names: list[str], fix: str) -> Check:
    """Every LFS file (a sha256 etag) re-hashed against its record."""
    recorded = {name: record[1] for name in names if (record := read_record(folder, name))
                and SHA256.fullmatch(record[1]) and (folder / name).is_file()}
    if not recorded:
        return Check(WARN, "snapshot hashes", "no file carries a recorded sha256 (no `hf download` record)")
    changed = [name for name, etag in sorted(recorded.items()) if sha256(folder / name) != etag]
    if changed:
        return Check(FAILS, "snapshot hashes", f"{', '.join(changed)} changed since the download (sha256 differs "
                                               "from the recorded etag)", fix)
    return Check(OK, "snapshot hashes", f"{len(recorded)} LFS files match the sha256 `hf download` recorded")


def check_snapshot(folder: Path, *, name: str, revision: str | None, root: Path, hashes: bool = False) -> list[Check]:
    """Files, weights, revision and (asked) hashes of the snapshot in `folder`; one FAILS line when
    there is no snapshot there at all."""
    fix = f"fetch it at the pinned revision: {download_command(name, revision, folder, root)}"
    try:
        config = json.loads((folder / "config.json").read_text())
    except OSError:
        return [Check(FAILS, "snapshot", f"no config.json in {folder}: no snapshot of {name} there",
                      f"{fix} (or set APSFT_MODEL_DIR to where it is)")]
    except ValueError as exc:
        return [Check(FAILS, "snapshot", f"{folder / 'config.json'} is not JSON ({exc})", fix)]
    weights, problem = weight_names(folder)
    small = ("config.json", "tokenizer_config.json", *sum(TOKENIZERS, ()), INDEX)
    present = [n for n in small if (folder / n).is_file()]
    checks = [files_check(folder, fix), weights_check(folder, weights, problem, fix),
              revision_check(folder, present + weights, revision, fix)]
    if isinstance(config, dict) and "vision_config" in config and not (folder / "preprocessor_config.json").is_file():
        checks.append(Check(WARN, "snapshot preprocessor", "no preprocessor_config.json, and config.json has a vision "
                                                           "tower: vLLM reads it unless run language-model-only", fix))
    checks.append(hashes_check(folder, present + weights, fix) if hashes else
                  Check(SKIPPED, "snapshot hashes", "not read (--hashes re-hashes each LFS file against its record)"))
    return checks
