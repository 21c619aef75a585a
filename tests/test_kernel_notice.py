"""Transformers' four reference-kernel warnings for Qwen3.5's linear-attention layers become one line
of ours, once per process (core/kernel_notice.py): a tiny Qwen3.5 text model's prefill and cached
decoding call all four kernels, in a fresh interpreter as a stage's process would."""

import subprocess
import sys

import pytest

from apsft_dagster.core.kernel_notice import FALLBACK, NOTICE

SCRIPT = """
import {first}
import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig
config = Qwen3_5TextConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=2, linear_num_value_heads=2,
    linear_key_head_dim=8, linear_value_head_dim=8, layer_types=["linear_attention"] * 3 + ["full_attention"])
torch.manual_seed(0)
model = Qwen3_5ForCausalLM(config).eval()
for _ in range(2):  # a second model call: no second notice
    model.generate(torch.tensor([[1, 2, 3, 4]]), max_new_tokens=3, do_sample=False, pad_token_id=0)
print("generated")
"""


def run(first: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT.format(first=first)], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.slow
def test_one_line_of_ours_replaces_transformers_four_fallback_warnings():
    ours = run("apsft_dagster")
    assert ours.returncode == 0, ours.stderr
    assert ours.stderr.count(NOTICE) == 1 and FALLBACK not in ours.stderr, ours.stderr


@pytest.mark.slow
def test_without_the_package_transformers_says_it_four_times():
    """The control: the same script without apsft_dagster prints transformers' own lines, one per
    kernel, so the test above passes because of the filter, not because nothing fell back."""
    theirs = run("os")
    assert theirs.returncode == 0, theirs.stderr
    assert theirs.stderr.count(FALLBACK) == 4 and NOTICE not in theirs.stderr, theirs.stderr
