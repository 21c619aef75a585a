# How the GPU lock (requirements/gpu.lock) is resolved, written once; sourced by scripts/lock_gpu.sh
# and scripts/setup_gpu.sh, which define step() first. The pinned uv of scripts/uv.sh (bootstrapped
# into .apsft/tools/ with python3's own venv and pip: a fresh clone needs nothing else) resolves for the CUDA machine's
# platform and Python, from PyPI only, ignoring every upload after a fixed date: a rerun on any later
# day gives the same lock. Move the date (and rerun bash scripts/lock_gpu.sh) to take newer releases.
# Wheels only, but for the one sdist (causal-conv1d, built against the installed torch): nothing else
# is ever compiled on install. That sets the platform's floor at glibc 2.31 (manylinux_2_31: Ubuntu
# 20.04, Debian 11 and later): vLLM 0.32 needs llguidance 1.7, whose Linux x86-64 wheels are
# manylinux_2_31; on glibc 2.28 pip would build it from source, with Rust.
source scripts/uv.sh  # the pinned uv and ensure_uv
GPU_UV_VERSION=$UV_VERSION
GPU_PLATFORM=x86_64-manylinux_2_31
GPU_SDIST=causal-conv1d
GPU_PYTHON_VERSION=3.11
GPU_INDEX=https://pypi.org/simple
GPU_EXCLUDE_NEWER=2026-12-01T00:00:00Z
GPU_IN=requirements/gpu.in
GPU_LOCK="${APSFT_GPU_LOCK:-requirements/gpu.lock}"  # a test points it at a mutated copy
GPU_UV="$UV_BIN"

uv_compile() {  # `uv pip compile` with the lock's settings and nothing from the caller's uv config
  (
    for var in $(compgen -e | grep '^UV_' || true); do
      [ "$var" = UV_CACHE_DIR ] || unset "$var"  # no extra index, constraint or override from outside
    done
    "$GPU_UV" pip compile --no-config --quiet --python-platform "$GPU_PLATFORM" \
      --python-version "$GPU_PYTHON_VERSION" --index-url "$GPU_INDEX" --exclude-newer "$GPU_EXCLUDE_NEWER" \
      --only-binary :all: --no-binary "$GPU_SDIST" "$@"
  )
}
