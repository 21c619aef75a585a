#!/usr/bin/env bash
# The distribution's packages the test lanes use, installed only when missing (Debian/Ubuntu):
#   postgresql               the PostgreSQL lane (tests/test_postgres_lane.py starts its own server)
#   chromium chromium-driver the browser lane (tests/test_ui_browser.py drives headless Chromium)
# Needs root or sudo; prints what to install by hand otherwise. Usage: scripts/system_packages.sh
set -euo pipefail
missing=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: system packages: postgresql, chromium, chromium-driver present"
  exit 0
fi
if [ "$(id -u)" -eq 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
  echo "setup: system packages: missing ${missing[*]}; install them as root: apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "setup: system packages: installing ${missing[*]} from the distribution ($(date +%H:%M:%S))"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
echo "setup: system packages: installed ${missing[*]} ($(date +%H:%M:%S))"
