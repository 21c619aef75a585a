# uv, pinned and bootstrapped once into .apsft/tools/ with python3's own venv and pip (a fresh clone
# needs nothing else); sourced by the setups (scripts/setup.sh, setup_vllm.sh) and the GPU lock
# (scripts/gpu_settings.sh), which define step() first.
#   ensure_uv                 install it, under a file lock (two setups, or two test workers, at once)
#   uv_install PYTHON ARGS..  `uv pip install ARGS` into PYTHON's venv from the indexes pip is set up
#                             with (index-url, extra-index-url, find-links, constraint: `pip config
#                             list`, its environment included), every index equally as pip treats them,
#                             compiled to bytecode as pip does (with APSFT_BYTECODE=lazy, as the test
#                             command sets it, not: see scripts/test.sh). Same pins, same sources as
#                             pip, about 3x faster on this project's 2-core machine (docs/timings.md).
UV_VERSION=0.13.9
UV_TOOLS=".apsft/tools/uv-$UV_VERSION"
UV_BIN="$UV_TOOLS/bin/uv"

uv_ready() { [ -x "$UV_BIN" ] && [ "$("$UV_BIN" --version 2>/dev/null | cut -d' ' -f2)" = "$UV_VERSION" ]; }

ensure_uv() {
  uv_ready && return
  mkdir -p "$(dirname "$UV_TOOLS")"
  exec {uv_lock}> "$UV_TOOLS.lock"
  flock "$uv_lock"
  if ! uv_ready; then
    step "installing uv==$UV_VERSION into $UV_TOOLS (once: python3 -m venv, then pip)"
    rm -rf "$UV_TOOLS"
    python3 -m venv "$UV_TOOLS"
    "$UV_TOOLS/bin/python" -m pip install -q --disable-pip-version-check "uv==$UV_VERSION" 2>&1 \
      | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  fi
  exec {uv_lock}>&-
}

pip_settings() {  # every value pip is set up with for KEY (files and PIP_* environment), one a line
  python3 -m pip config list 2>/dev/null | sed -n "s/^[^.]*\.$1='\(.*\)'$/\1/p" | tr ' ' '\n' | sed '/^$/d'
}

UV_SOURCES=()  # uv's flags for pip's sources, read from `pip config list` once (uv_install)
uv_install() {
  local python=$1; shift
  local value
  if [ ${#UV_SOURCES[@]} = 0 ]; then
    UV_SOURCES=(--quiet --index-strategy unsafe-best-match)
    [ "${APSFT_BYTECODE:-}" = lazy ] || UV_SOURCES+=(--compile-bytecode)
    value="$(pip_settings index-url | tail -n 1)"
    [ -z "$value" ] || UV_SOURCES+=(--index-url "$value")
    while read -r value; do UV_SOURCES+=(--extra-index-url "$value"); done < <(pip_settings extra-index-url)
    while read -r value; do UV_SOURCES+=(--find-links "$value"); done < <(pip_settings find-links | sort -u)
    while read -r value; do [ ! -f "$value" ] || UV_SOURCES+=(--constraint "$value"); done < <(pip_settings constraint)
    UV_CERT="$(pip_settings cert | tail -n 1)"
  fi
  SSL_CERT_FILE="${UV_CERT:-${SSL_CERT_FILE:-}}" "$UV_BIN" pip install --python "$python" "${UV_SOURCES[@]}" "$@"
}
