#!/usr/bin/env bash
# The README's test command, and exactly what .ci/run calls: set up .venv and run the suite in it;
# meanwhile set up .venv-vllm (pip: mostly unpacking; the suite runs on every core through
# pytest-xdist: docs/timings.md); then hand the vLLM lane its models (built by .venv) and run the
# lane in .venv-vllm. Any failing step fails the command.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
mkdir -p .apsft
log=.apsft/setup-vllm.log
bash scripts/setup.sh vllm > "$log" 2>&1 &
setup_pid=$!
echo "test: .venv-vllm is being set up beside the suite (log: $log)"
suite=0
.venv/bin/python -m pytest -q -n auto --dist loadgroup || suite=$?  # one worker per core (pytest-xdist)
setup=0
wait "$setup_pid" || setup=$?
cat "$log"
if [ "$suite" != 0 ]; then exit "$suite"; fi
if [ "$setup" != 0 ]; then echo "test: setting up .venv-vllm failed (its log is above)"; exit "$setup"; fi
.venv/bin/python scripts/vllm_lane_model.py
.venv-vllm/bin/python -m pytest -q tests/vllm_lane
