#!/usr/bin/env bash
# The README's test command, and exactly what .ci/run calls: set up .venv, then run the suite in it
# on every core (pytest-xdist) while, beside it, .venv-vllm is set up, the main venv hands the vLLM
# lane its models and the lane runs in .venv-vllm (each lane process holds one pinned torch thread,
# so the three processes share the two cores without stalling each other; docs/timings.md). The
# lane's output is printed once the suite ends. Any failing step fails the command.
# The lane runs at nice 3: the suite is the longer path (10-12 min against 6-9 beside a busy core), so
# where the cores are short the kernel gives the suite's workers the larger share and the lane its
# slack (docs/timings.md); on an idle core nice changes nothing.
# Bytecode: the setups compile every installed module up front (uv --compile-bytecode) because where
# PYTHONDONTWRITEBYTECODE is set (this machine, CI's image) no process keeps what it compiles. Here the
# suite and the lane import what they use within minutes, so they keep it instead (the variable unset
# for them) and the setups compile nothing: 41 CPU-s for .venv and 42 for .venv-vllm went to modules no
# test imports (docs/setup-and-tests.md). A later `bash scripts/setup.sh` (command 1) compiles as before.
set -euo pipefail
cd "$(dirname "$0")/.."
export APSFT_BYTECODE=lazy
unset PYTHONDONTWRITEBYTECODE
bash scripts/setup.sh test
lint=0  # ruff (the `dev` extra, pyproject's [tool.ruff]): import order, pyflakes, pycodestyle; reported, then the suite
.venv/bin/ruff check --no-cache apsft_dagster tests scripts benchmarks || lint=$?
mkdir -p .apsft
log=.apsft/vllm-lane.log
lane() {
  bash scripts/setup.sh vllm || { echo "test: setting up .venv-vllm failed"; return 1; }
  .venv/bin/python scripts/vllm_lane_model.py || return 1
  .venv-vllm/bin/python -m pytest -q -p no:cacheprovider tests/vllm_lane
}
( renice -n 3 -p "$BASHPID" > /dev/null; lane ) > "$log" 2>&1 &
lane_pid=$!
echo "test: the vLLM lane (.venv-vllm's setup, its models, its tests) runs beside the suite at nice 3 (log: $log)"
suite=0
.venv/bin/python -m pytest -q -n auto --dist loadgroup || suite=$?  # one worker per core (pytest-xdist)
echo "test: the suite is done; waiting for the vLLM lane"
lane_rc=0
wait "$lane_pid" || lane_rc=$?
cat "$log"
if [ "$suite" != 0 ]; then exit "$suite"; fi
if [ "$lint" != 0 ]; then echo "test: ruff found problems (above, before the suite); \`.venv/bin/ruff check --fix\` fixes most"; exit "$lint"; fi
if [ "$lane_rc" != 0 ]; then echo "test: the vLLM lane failed (its log is above)"; exit "$lane_rc"; fi
