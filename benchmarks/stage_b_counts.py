"""Stage B's tables counted from the stored files alone (issue 37): for every policy the plan names,
its greedy rows per split and, for the sampled policies, its samples per task, against the task
catalog's own split sizes. Reads Parquet and JSON with DuckDB, none of the project's readers, so
it checks the stages rather than repeating them.

Run: .venv/bin/python benchmarks/stage_b_counts.py STORE [K]   (K: samples per task, the registered 8)
Prints one row per (policy, split) and ends `complete` or names each gap (exit 1).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import duckdb


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2):
        print(__doc__.strip().splitlines()[-2])
        return 2
    root, k = Path(argv[0]), int(argv[1]) if len(argv) == 2 else 8
    plan = json.loads((root / "stage_b_analysis/plan.json").read_text())
    con = duckdb.connect()
    sizes = dict(con.execute(f"select split, count(*) from '{root / 'task_catalog.parquet'}' "
                             "where split in ('core_iid', 'core_hard', 'held_family', 'rendering') "
                             "group by split").fetchall())
    gaps = []
    print(f"winner {plan['winner']}, baseline {plan['baseline']}; tasks per split {dict(sorted(sizes.items()))}")
    print(f"{'policy':<28} {'split':<12} {'greedy':>7} {'tasks x k':>10}")
    for policy in plan["greedy_policies"]:
        table = root / "stage_b_eval" / f"{policy}.parquet"
        greedy = dict(con.execute(f"select split, count(distinct task_id) from '{table}' group by split").fetchall())
        samples = {}
        if policy in plan["sampled_policies"]:
            drawn = root / "stage_b_eval" / f"{policy}.samples.parquet"
            samples = dict(con.execute(f"select split, count(*) from '{drawn}' group by split").fetchall())
        for split, n in sorted(sizes.items()):
            shown = f"{samples.get(split, 0):>10}" if samples else f"{'-':>10}"
            print(f"{policy:<28} {split:<12} {greedy.get(split, 0):>7} {shown}")
            if greedy.get(split, 0) != n:
                gaps.append(f"{policy} {split}: {greedy.get(split, 0)} greedy rows of {n} tasks")
            want = n * k if samples else None
            if samples and samples.get(split, 0) != want:
                gaps.append(f"{policy} {split}: {samples.get(split, 0)} samples, want {want}")
    missing = sorted(set(plan["sampled_policies"]) - set(plan["greedy_policies"]))
    gaps += [f"{p}: sampled but not evaluated greedily" for p in missing]
    print("complete" if not gaps else "gaps:\n  " + "\n  ".join(gaps))
    return 0 if not gaps else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
