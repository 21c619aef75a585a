#!/usr/bin/env bash
# Regenerate requirements/gpu.lock, the lock of the GPU environment (.venv-gpu): the exact version
# and every sha256 hash of each distribution, for Linux x86-64 (manylinux_2_31) and CPython 3.11,
# from PyPI only, wheels only but for causal-conv1d's sdist, ignoring uploads after the date in
# scripts/gpu_settings.sh. Its input:
# requirements/gpu.in, plus pyproject.toml's runtime dependencies with their pins less transformers
# (scripts/gpu_lock.py apsft-deps, on uv's stdin; the lock gives them no "# via" line). uv==0.13.9 is
# bootstrapped into .apsft/tools/. Commit the lock; `bash scripts/setup.sh gpu --dry-run` checks it.
# Usage: bash scripts/lock_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "lock-gpu: $* ($(date +%H:%M:%S))"; }
source scripts/gpu_settings.sh
ensure_uv
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
step "resolving $GPU_IN + pyproject.toml's dependencies for $GPU_PLATFORM, CPython $GPU_PYTHON_VERSION," \
     "$GPU_INDEX, uploads before $GPU_EXCLUDE_NEWER (uv $GPU_UV_VERSION)"
python3 scripts/gpu_lock.py apsft-deps \
  | uv_compile "$GPU_IN" - --generate-hashes --no-header \
      -o "$tmp/body.txt"
{
  echo "# The GPU environment's lock (.venv-gpu): do not edit; made by \`bash scripts/lock_gpu.sh\`, which runs"
  echo "#   uv $GPU_UV_VERSION: python3 scripts/gpu_lock.py apsft-deps | uv pip compile $GPU_IN - --generate-hashes"
  echo "#   --python-platform $GPU_PLATFORM --python-version $GPU_PYTHON_VERSION --index-url $GPU_INDEX"
  echo "#   --exclude-newer $GPU_EXCLUDE_NEWER --only-binary :all: --no-binary $GPU_SDIST"
  echo "# (the settings: scripts/gpu_settings.sh). The pins with no \"# via\" line are pyproject.toml's"
  echo "# [project] dependencies less transformers, which comes as vLLM accepts it."
  echo "# Installed by \`bash scripts/setup.sh gpu\`; \`bash scripts/setup.sh gpu --dry-run\` resolves it again."
  cat "$tmp/body.txt"
} > "$tmp/gpu.lock"
mv "$tmp/gpu.lock" "$GPU_LOCK"
pins="$(python3 scripts/gpu_lock.py pins "$GPU_LOCK")"
step "wrote $GPU_LOCK: $(echo "$pins" | wc -l) pins, $(grep -c -- '--hash=' "$GPU_LOCK") hashes;" \
     "$(echo "$pins" | grep -E '^(vllm|torch|transformers|peft)==' | tr '\n' ' ')"
