#!/usr/bin/env bash
# Issue 36's figures as a new user meets them: a fresh clone of this repository's committed HEAD,
# caches empty (XDG_CACHE_HOME fresh: uv's cache and the model cache), one command timed, quiet or
# beside `yes > /dev/null` keeping one core busy. The machine's speed is measured before and after
# (benchmarks/bench_calibrate.py, in this checkout's .venv): the same machine drifts by 20% within
# an hour (docs/timings.md), so a figure is read with its calibration.
#
# usage: bash benchmarks/fresh_clone.sh WHAT [busy] [DIR]
#   WHAT  command1   README command 1: `bash scripts/setup.sh && .venv/bin/apsft run`
#         cache-off  the same with APSFT_MODEL_CACHE=off (the model built, not shipped)
#         laptop     `bash scripts/setup.sh && .venv/bin/apsft run --profile laptop` (output to run.log)
#         rehearsal  the same with `--profile laptop_rehearsal` (issue 37: Stage A and B from an empty store)
#         ci         `.ci/run` (README command 2)
#         full_cpu   the slow lane of issue 35: `bash scripts/setup.sh`, the real-vocabulary snapshot
#                    (`python scripts/qwen35_snapshot.py`, timed as snapshot_s) and `apsft run --profile
#                    full_cpu`, the dry run of `full` at the registered token limits (over an hour here)
#   DIR   where the clone goes (default /tmp/apsft-fresh); DIR/NAME/summary.txt holds the figures,
#         DIR/NAME/*.log the output, DIR/NAME/repo the clone and its store (compare two runs'
#         receipts with benchmarks/compare_stores.py).
# A run's stderr (its progress) arrives through a pipe, as in `apsft run ... | tee`, each line
# stamped with the seconds since the run began (run.err); the summary gives the longest silence.
set -euo pipefail
what=${1:?usage: fresh_clone.sh command1|cache-off|laptop|rehearsal|ci|full_cpu [busy] [DIR]}
busy=${2:-}
[ "$busy" = busy ] || [ -z "$busy" ] || { echo "fresh_clone: the second argument is 'busy' or nothing"; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
name=$what${busy:+-busy}
root=${3:-/tmp/apsft-fresh}/$name
rm -rf "$root" && mkdir -p "$root"
git clone -q "$here" "$root/repo"
stamp() { python3 -u -c 'import sys, time
t0 = time.monotonic()
for line in sys.stdin: sys.stdout.write(f"{time.monotonic() - t0:8.1f} {line}")'; }
calibrate() { "$here/.venv/bin/python" "$here/benchmarks/bench_calibrate.py" 2>/dev/null | tail -1; }
before=$(calibrate)
cd "$root/repo"
export XDG_CACHE_HOME=$root/xdg
ypid=
if [ -n "$busy" ]; then
  yes > /dev/null &
  ypid=$!
  trap 'kill "$ypid" 2>/dev/null || true' EXIT
fi
start=$(date +%s.%N)
setup_s= snapshot_s= silence=
case $what in
  ci) rc=0; .ci/run > "$root/ci.log" 2>&1 || rc=$? ;;
  command1|cache-off|laptop|rehearsal|full_cpu)
    bash scripts/setup.sh > "$root/setup.log" 2>&1
    setup_s=$(echo "$(date +%s.%N) - $start" | bc)
    args=(run)
    case $what in laptop|full_cpu) args+=(--profile "$what") ;; rehearsal) args+=(--profile laptop_rehearsal) ;; esac
    unset APSFT_MODEL_CACHE  # the user's cache in XDG_CACHE_HOME, empty
    [ "$what" = cache-off ] && export APSFT_MODEL_CACHE=off
    rc=0
    if [ "$what" = full_cpu ]; then  # its real-vocabulary snapshot first, timed apart
      .venv/bin/python scripts/qwen35_snapshot.py > "$root/snapshot.log" 2>&1 || rc=$?
      snapshot_s=$(echo "$(date +%s.%N) - $start - $setup_s" | bc)
    fi
    if [ "$rc" = 0 ]; then
      { .venv/bin/apsft "${args[@]}" 2>&1 1>&3 3>&- | stamp > "$root/run.err"; } 3> "$root/run.log" || rc=$?
      silence=$(awk '{ if ($1 - last > gap) gap = $1 - last; last = $1 }
        END { printf "%d stderr lines, the longest silence %.1f s", NR, gap }' "$root/run.err")
    fi ;;
  *) echo "fresh_clone: unknown WHAT '$what'"; exit 2 ;;
esac
total=$(echo "$(date +%s.%N) - $start" | bc)
if [ -n "$ypid" ]; then kill "$ypid"; trap - EXIT; fi
after=$(calibrate)
{
  echo "$name at $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores: rc=$rc, total ${total} s${setup_s:+ (setup ${setup_s} s)}${snapshot_s:+ (snapshot ${snapshot_s} s)}"
  echo "  before: $before"
  echo "  after:  $after"
  [ -z "$silence" ] || echo "  progress: $silence"
} | tee "$root/summary.txt"
exit "$rc"
