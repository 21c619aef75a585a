from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast

from apsft_dagster.core.embedded.tokenizer import train_tokenizer
from apsft_dagster.core.protocol import (
    BOUNDARY,
    IM_END,
    SPECIAL_TOKENS,
    format_answer,
    format_prompt,
    format_record,
    locate_spans,
)


def _hand_made_tokenizer(merge: str, specials=SPECIAL_TOKENS) -> PreTrainedTokenizerFast:
    """A character BPE with one two-character merge and no pre-tokenizer."""
    chars = sorted(set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 :.\n|<>/_"))
    vocab = {c: i for i, c in enumerate(chars)}
    vocab[merge] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(merge[0], merge[1])]))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(list(specials))
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=IM_END, pad_token=specials[0])


def test_whole_string_differs_from_piecewise_and_spans_follow_offsets():
    tok = _hand_made_tokenizer("\n\n")  # like Qwen's "\n\n" token (id 271 there)
    prompt = format_prompt("Count.")  # ends with "<think>\n"
    thought = "\n"  # Qwen-style empty thought: the whole string holds "\n\n" across the seam
    answer = format_answer("7")
    whole = tok(prompt + thought + BOUNDARY + answer, add_special_tokens=False)["input_ids"]
    piecewise = sum((tok(p, add_special_tokens=False)["input_ids"] for p in (prompt, thought, BOUNDARY, answer)), [])
    assert whole != piecewise
    assert len(piecewise) == len(whole) + 1

    spans = locate_spans(tok, prompt, thought, answer)
    assert spans.input_ids == whole
    nn = tok.convert_tokens_to_ids("\n\n")
    # The merged "\n\n" starts on the prompt's last character, so it is prompt; the thought is empty.
    assert spans.input_ids[spans.prompt.stop - 1] == nn
    assert len(spans.thought) == 0
    assert tok.decode(spans.input_ids[spans.boundary.start:spans.boundary.stop]) == BOUNDARY
    assert tok.decode(spans.input_ids[spans.answer.start:spans.answer.stop]) == " 7"


def test_a_token_straddling_thought_and_boundary_counts_as_thought():
    # "</think>" is not special here, so the merge "\n<" can straddle the thought/boundary seam.
    tok = _hand_made_tokenizer("\n<", specials=[t for t in SPECIAL_TOKENS if t != "</think>"])
    spans = locate_spans(tok, format_prompt("Q"), "abc\n", format_answer("9"))
    ids = spans.input_ids
    assert tok.decode(ids[spans.thought.start:spans.thought.stop]) == "abc\n<"
    assert tok.decode(ids[spans.boundary.start:spans.boundary.stop]) == BOUNDARY[1:]
    assert tok.decode(ids[spans.answer.start:spans.answer.stop]) == " 9"


def test_spans_partition_the_record_with_the_embedded_tokenizer():
    texts = [format_record(f"Task {i}: add {i} and {i + 1}.", f"Step: {i} + {i + 1} = {2 * i + 1}.\n",
                           str(2 * i + 1)) for i in range(200)]
    tok = train_tokenizer(texts, vocab_size=400)
    prompt, thought, answer = format_prompt("Task 3: add 3 and 4."), "Step: 3 + 4 = 7.\n", format_answer("7")
    spans = locate_spans(tok, prompt, thought, answer, IM_END)
    ids = spans.input_ids
    pieces = [tok.decode(ids[s.start:s.stop])
              for s in (spans.prompt, spans.thought, spans.boundary, spans.answer, spans.end)]
    assert pieces == [prompt, thought, BOUNDARY, answer, IM_END]
    assert spans.end.stop == len(ids)
    # single-digit pre-tokenization: every digit of the answer is its own token
    assert [tok.decode([i]) for i in ids[spans.answer.start:spans.answer.stop]][-1] == "7"
    assert all(len(tok.decode([i]).strip()) <= 1 for i in ids if tok.decode([i]).strip().isdigit())
