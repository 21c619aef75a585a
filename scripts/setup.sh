#!/usr/bin/env bash
# Set up .venv: the CPU torch pin first (found on this machine's disk; an unpinned torch would pull a
# multi-GB CUDA build), then the package in editable mode with the given extras; installed by the
# pinned uv from the indexes pip is set up with (scripts/uv.sh), about 3x faster than pip itself.
# Idempotent: a stamp of what was installed (pyproject.toml, extras, this script) lets a rerun
# skip pip entirely when nothing changed.   Usage: scripts/setup.sh [extras | vllm | gpu [--dry-run]]
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
step() { echo "setup: $* ($(date +%H:%M:%S))"; }
if [ "$extras" = "vllm" ]; then shift; exec bash scripts/setup_vllm.sh "$@"; fi  # vLLM's CPU build: a venv of its own
if [ "$extras" = "gpu" ]; then shift; exec bash scripts/setup_gpu.sh "$@"; fi  # CUDA: .venv-gpu from the lock
source scripts/uv.sh
case ",$extras," in *,test,*) bash scripts/system_packages.sh ;; esac  # PostgreSQL and Chromium lanes
stamp_file=".venv/.apsft-setup${extras:+-$extras}"
own_bytecode() {  # the package's own modules, compiled where stale: where PYTHONDONTWRITEBYTECODE is set (this
  # machine and CI's image) no process keeps what it compiles, and every `apsft` or test process compiled
  # them all again (0.25 s a process; the installed libraries get theirs from uv's --compile-bytecode)
  .venv/bin/python -m compileall -q apsft_dagster > /dev/null
}
stamp="$(cat pyproject.toml scripts/setup.sh scripts/uv.sh scripts/system_packages.sh | sha256sum | cut -d' ' -f1)"
if [ -x .venv/bin/python ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ] \
   && .venv/bin/python -c "import apsft_dagster, torch, dagster" 2>/dev/null; then
  step ".venv is up to date (pyproject.toml and extras '${extras}' unchanged since it was installed)"
  own_bytecode
  exit 0
fi
if [ -x .venv/bin/python ]; then step "reusing .venv"; else step "creating .venv"; python3 -m venv .venv; fi
ensure_uv
step "installing the CPU build torch==2.13.0"
uv_install .venv/bin/python torch==2.13.0
step "installing apsft${extras:+[$extras]} in editable mode with dagster, transformers, peft, polars, duckdb"
uv_install .venv/bin/python -e ".${extras:+[$extras]}"
own_bytecode
echo "$stamp" > "$stamp_file"
echo "setup: .venv ready ($(.venv/bin/python -c 'import torch, dagster; print("torch", torch.__version__, "dagster", dagster.__version__)'))"
