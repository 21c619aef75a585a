"""Kill anywhere (issue 37): README command 1's run, N times, each killed with SIGKILL at a moment
drawn from a fixed seed (every third run twice), then resumed with the same command. Every resumed
run must finish with every receipt and every file byte-identical to an uninterrupted run's (the
DuckDB audit file aside: its pages differ between any two runs), and leave no temp file or half
folder (core/leftovers.py), no unfinished Dagster run and no claimed pool slot.

A moment is a stage and a fraction: the kill comes that fraction of the stage's duration in the
uninterrupted run after the stage starts (the line of the stage before it), so a one-second stage
(the seal, the report) is hit as surely as the harvest. The stages are dealt round the runs from a
seeded shuffle, so N >= 12 hits each; the model build twice over: its shipped copy, and a real
pretraining (`APSFT_MODEL_CACHE=off` for that run's every invocation). Each kill is reported with
the stage that was in flight (the first without its line yet), its moment and the result; the last
line is `chaos: K of N resumed byte-identical`. One heavy job: run nothing else beside it.

With `--ray-workers W` every invocation runs `apsft run --devices W` (a local Ray cluster, issue 59)
and each kill hits one of its engine workers (a `ray::EngineWorker` process) in an engine stage
instead of the run: the run itself must then finish, with no resume, byte-identical.

usage: .venv/bin/python benchmarks/chaos.py N [--seed 37] [--dir /tmp/apsft-chaos] [--reuse-reference]
                                              [--ray-workers W]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from apsft_dagster.experiment.stages import STAGES  # noqa: E402

JOBS = [s.job for s in STAGES]
LINE = re.compile(r"^  (\w+_job)\s+(ok|skip|FAILED)\s")
BUILD = "model build (pretraining)"
# (what the issue names, the stage jobs it spans)
TARGETS = [(BUILD, ["tasks_and_model_job"]), ("model build (shipped copy)", ["tasks_and_model_job"]),
           ("harvest", ["trace_bank_job"]), ("scoring", ["bank_and_parity_job", "score_bank_job",
                                                         "score_bank_index_job"]),
           ("R1", ["r1_labels_job", "r1_labels_index_job"]), ("seal", ["evidence_seal_job"]),
           ("selection", ["sft_arms_job", "sft_manifest_and_audits_job"]), ("training", ["adapters_job"]),
           ("merge and probe", ["merged_models_job"]), ("generations", ["stage_a_generations_job"]),
           ("analysis", ["stage_a_eval_job", "stage_a_analysis_job"]), ("report", ["verdict_and_report_job"])]
BUILD_WINDOW = (10.0, 150.0)  # seconds after start: inside a pretraining of the smoke model (about 250 s)
UNCOMPARED = ("audits.duckdb",)
RAY_TARGETS = ("harvest", "scoring", "R1", "training", "generations")  # the stages whose partitions go to workers
RAY_ARGS: list[str] = []  # `--devices W` with --ray-workers


class Invocation:
    """One `apsft run` in its own process group, its stage lines timestamped as they arrive."""

    def __init__(self, state: Path, env: dict, log):
        self.started = time.monotonic()
        self.lines: dict[str, float] = {}
        self.proc = subprocess.Popen([str(ROOT / ".venv/bin/apsft"), "run", *RAY_ARGS], cwd=ROOT, env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.reader = threading.Thread(target=self._read, args=(log,), daemon=True)
        self.reader.start()

    def _read(self, log) -> None:
        for line in self.proc.stdout:
            log.write(line)
            if m := LINE.match(line):
                self.lines.setdefault(m.group(1), time.monotonic() - self.started)

    def in_flight(self) -> str:
        return next((j for j in JOBS if j not in self.lines), "(after the last stage)")

    def kill_at(self, start_job: str | None, delay: float) -> tuple[float, str] | None:
        """SIGKILL the group `delay` s after `start_job`'s stage starts (None: the process start);
        (moment, stage in flight), or None when the run ended first."""
        before = JOBS[JOBS.index(start_job) - 1] if start_job and JOBS.index(start_job) else None
        while self.proc.poll() is None:
            begun = 0.0 if before is None else self.lines.get(before)
            now = time.monotonic() - self.started
            if begun is not None and now >= begun + delay:
                stage = self.in_flight()
                if RAY_ARGS:  # a worker, not the run: the run goes on
                    if (worker := engine_worker()) is None:
                        time.sleep(0.1)
                        continue
                    os.kill(worker, signal.SIGKILL)
                    return now, f"{stage} (ray worker {worker})"
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
                self.reader.join()
                return now, stage
            time.sleep(0.02)
        self.reader.join()
        return None

    def finish(self) -> int:
        rc = self.proc.wait()
        self.reader.join()
        return rc


def engine_worker() -> int | None:
    """The process id of a live Ray engine worker (its process title is `ray::EngineWorker...`), if any."""
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "cmdline").read_bytes().startswith(b"ray::EngineWorker"):
                return int(proc.name)
        except OSError:
            continue
    return None


def environment(state: Path, build: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("APSFT_", "DAGSTER_"))}
    env.update(APSFT_STATE_DIR=str(state), PYTHONUNBUFFERED="1")
    if build:
        env["APSFT_MODEL_CACHE"] = "off"
    return env


def windows(lines: dict[str, float]) -> dict[str, tuple[float, float]]:
    """Each target's (start, end) in the uninterrupted run, from its stage lines' arrival times."""
    out = {}
    for name, jobs in TARGETS:
        first = JOBS.index(jobs[0])
        start = lines[JOBS[first - 1]] if first else 0.0
        out[name] = (start, lines[jobs[-1]])
    return out


def digests(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and p.name not in UNCOMPARED}


def moment(rng: random.Random, target: str, spans: dict) -> tuple[str | None, float]:
    """(the job after whose predecessor's line the clock starts, the delay) for a target."""
    if target == BUILD:
        return None, rng.uniform(*BUILD_WINDOW)
    jobs = dict(TARGETS)[target]
    start, end = spans[target]
    return jobs[0], rng.uniform(0.05, 0.95) * max(end - start, 0.2)


def leftovers(state: Path) -> list[str]:
    """What a resumed run must not leave: temp siblings whose process is gone (store, model cache),
    helper folders of gone processes, unfinished Dagster runs, claimed pool slots."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    from apsft_dagster.core.leftovers import dead_temps
    from apsft_dagster.core.paths import store_instance
    from apsft_dagster.run_recovery import unfinished
    from apsft_dagster.workers.local import dead_folders

    found = [f"temp {p}" for p in dead_temps(state)] + [f"helper folder {p}" for p in dead_folders()]
    instance = dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(store_instance(state / "store" / "smoke", state))))
    try:
        found += unfinished(instance)
    finally:
        instance.dispose()
    return found


def one_run(i: int, targets: list[str], spans: dict, reference: dict, rng: random.Random, root: Path) -> dict:
    """Run i: killed at each target in turn (the second drawn at or after the first kill's stage),
    then resumed to the end; its kills, rc and what differs from the uninterrupted run."""
    state = root / f"run-{i:02d}"
    shutil.rmtree(state, ignore_errors=True)
    env = environment(state, build=targets[0] == BUILD)
    kills, started = [], time.monotonic()
    with open(root / f"run-{i:02d}.log", "w") as log:
        run = Invocation(state, env, log) if RAY_ARGS else None  # workers die; the one run goes on
        for target in targets:
            start_job, delay = moment(rng, target, spans)
            got = (run or Invocation(state, env, log)).kill_at(start_job, delay)
            kills.append({"target": target, "moment_s": round(got[0], 2) if got else None,
                          "in_flight": got[1] if got else "run ended before the kill"})
        rc = (run or Invocation(state, env, log)).finish()
    store = state / "store" / "smoke"
    mine = digests(store) if store.is_dir() else {}
    differ = sorted(k for k in set(mine) | set(reference) if mine.get(k) != reference.get(k))
    receipts = [k for k in differ if k.endswith(".receipt.json")]
    problems = leftovers(state)
    said = (root / f"run-{i:02d}.log").read_text()
    swept = sum(int(m.group(1)) for m in re.finditer(r"removed (\d+) temp file", said))
    ok = rc == 0 and not differ and not problems
    return {"run": i, "kills": kills, "rc": rc, "seconds": round(time.monotonic() - started, 1),
            "receipts": sum(k.endswith(".receipt.json") for k in reference), "receipts_differ": receipts,
            "files_differ": differ[:20], "leftovers": problems[:20], "swept": swept,
            "identical": ok}


def plan(n: int, seed: int, spans: dict) -> list[list[str]]:
    """Each run's targets: the stages dealt round from a seeded shuffle; every third run a second
    kill at a stage at or after the first's."""
    rng, names = random.Random(seed), [t for t, _ in TARGETS if not RAY_ARGS or t in RAY_TARGETS]
    order = rng.sample(names, len(names))
    runs = []
    for i in range(n):
        first = order[i % len(order)]
        targets = [first]
        if i % 3 == 2:
            at = JOBS.index(dict(TARGETS)[first][0])
            later = [t for t, jobs in TARGETS if t != BUILD and JOBS.index(jobs[0]) >= at and t in names]
            targets.append(rng.choice(later))
        runs.append(targets)
    return runs


def reference_lines(root: Path, reuse: bool) -> dict[str, float] | None:
    """The uninterrupted run (in root/reference): each stage line's arrival time, or None if it failed."""
    saved, state = root / "reference.json", root / "reference"
    if reuse and saved.is_file():
        return json.loads(saved.read_text())
    shutil.rmtree(state, ignore_errors=True)
    with open(root / "reference.log", "w") as log:
        ref = Invocation(state, environment(state, False), log)
        if ref.finish() != 0:
            return None
    saved.write_text(json.dumps(ref.lines))
    return ref.lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("n", type=int)
    p.add_argument("--seed", type=int, default=37)
    p.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "apsft-chaos")
    p.add_argument("--reuse-reference", action="store_true",
                   help="keep DIR's uninterrupted run from an earlier call (same commit) instead of running it again")
    p.add_argument("--ray-workers", type=int, metavar="W",
                   help="run on a local Ray cluster with W workers a stage and kill workers, not the run")
    args = p.parse_args(argv)
    if args.ray_workers:
        RAY_ARGS.extend(["--devices", str(args.ray_workers)])
    args.dir.mkdir(parents=True, exist_ok=True)
    lines = reference_lines(args.dir, args.reuse_reference)
    if lines is None:
        print(f"chaos: the uninterrupted run failed; see {args.dir / 'reference.log'}")
        return 1
    spans, reference = windows(lines), digests(args.dir / "reference" / "store" / "smoke")
    print(f"chaos: reference run {max(lines.values()):.0f} s, {len(reference)} files; stage windows "
          + ", ".join(f"{t} {a:.0f}-{b:.0f} s" for t, (a, b) in spans.items() if t != BUILD), flush=True)
    rng, results = random.Random(args.seed + 1), []
    for i, targets in enumerate(plan(args.n, args.seed, spans)):
        r = one_run(i, targets, spans, reference, rng, args.dir)
        results.append(r)
        shown = "; ".join(f"{k['target']}: killed at {k['moment_s']} s in {k['in_flight']}" if k["moment_s"]
                          else f"{k['target']}: {k['in_flight']}" for k in r["kills"])
        verdict = "byte-identical" if r["identical"] else (f"rc {r['rc']}, {len(r['files_differ'])} files differ "
                                                           f"{r['files_differ'][:3]}, leftovers {r['leftovers'][:3]}")
        verdict += f" (swept {r['swept']} temp files at a restart)" if r["swept"] else ""
        ended = "finished" if RAY_ARGS else "resumed"  # with --ray-workers the run itself was never stopped
        print(f"  run {i:2d} ({r['seconds']:.0f} s): {shown} -> {ended} {verdict}", flush=True)
        if r["identical"]:
            shutil.rmtree(args.dir / f"run-{i:02d}", ignore_errors=True)
    (args.dir / "chaos.json").write_text(json.dumps({"seed": args.seed, "windows": spans, "runs": results}, indent=1))
    hit = sorted({k["in_flight"] for r in results for k in r["kills"] if k["moment_s"]})
    print(f"  stages hit: {', '.join(hit)}")
    print(f"chaos: {sum(r['identical'] for r in results)} of {len(results)} resumed byte-identical")
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
