#!/usr/bin/env bash
# The README's test command, and exactly what .ci/run calls: set up both venvs, run the suite in
# .venv, hand the vLLM lane its models (built by .venv), then run the lane in .venv-vllm.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
bash scripts/setup.sh vllm
.venv/bin/python -m pytest -q
.venv/bin/python scripts/vllm_lane_model.py
.venv-vllm/bin/python -m pytest -q tests/vllm_lane
