"""The embedded tokenizer: byte-level BPE with single-digit pre-tokenization, trained locally."""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

from apsft_dagster.core.protocol import IM_END, PAD, SPECIAL_TOKENS


def train_tokenizer(texts: Iterable[str], vocab_size: int,
                    extra_special: tuple[str, ...] = ()) -> PreTrainedTokenizerFast:
    """Digits are always single tokens, so arithmetic never hides inside merged number tokens.
    `extra_special`: more special tokens after the protocol's (a Qwen3.5 snapshot's vision tokens)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    # Untrimmed offsets: a token's start is its first byte, which is what span location needs.
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        special_tokens=[*SPECIAL_TOKENS, *extra_special], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=IM_END, pad_token=PAD,
        extra_special_tokens=[t for t in (*SPECIAL_TOKENS, *extra_special) if t not in (IM_END, PAD)],
    )
