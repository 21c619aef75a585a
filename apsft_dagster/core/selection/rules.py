"""The six SFT arms, two rows per retained task (docs/PROTOCOL.md §9); the arms themselves, their
roles and row rules are the table in core/selection/arms.py, and each rule is a function here.

Public API: `select_arms(candidates, *, seed, top_k=12, band=0.25)`.

Structural distance (potential arms). A thought's *skeleton* is the set of its non-empty lines
with every run of digits replaced by `#` and whitespace collapsed. The distance between two
thoughts is the pair (1 - Jaccard similarity of their skeletons, |difference in line counts|),
compared lexicographically: first how many step shapes differ, then how differently long the
step lists are. Ties go to the better-ranked trace. It never looks at length in tokens, so the
potential arms never reward brevity.
"""

from __future__ import annotations

import re
from collections import defaultdict

import polars as pl

from apsft_dagster.core.balance import cell_problems, tasks_per_cell
from apsft_dagster.core.errors import BalanceError, InfeasibleAssignmentError
from apsft_dagster.core.seeds import derive_seed
from apsft_dagster.core.selection.arms import ARM, ARM_TABLE, ARMS, ArmSpec
from apsft_dagster.core.selection.assignment import min_cost_assignment

ROWS_PER_TASK = 2


def skeleton(thought: str) -> frozenset[str]:
    return frozenset(_lines(thought))


def _lines(thought: str) -> list[str]:
    return [re.sub(r"\s+", " ", re.sub(r"\d+", "#", line)).strip() for line in thought.split("\n") if line.strip()]


def structural_distance(a: str, b: str) -> tuple[float, int]:
    """The definition (module docstring); `distances_to_best` computes the same in bulk."""
    sa, sb = skeleton(a), skeleton(b)
    union = sa | sb
    jaccard = len(sa & sb) / len(union) if union else 1.0
    return (1.0 - jaccard, abs(len(_lines(a)) - len(_lines(b))))


def top_traces(eligible: pl.DataFrame, score: str, top_k: int) -> pl.DataFrame:
    """task_id, trace_id of each task's top k by `score` (ties by trace id), best first."""
    return (eligible.select("task_id", "trace_id", score).sort([score, "trace_id"], descending=[True, False])
            .group_by("task_id", maintain_order=True).head(top_k).select("task_id", "trace_id"))


def skeletons(traces: pl.DataFrame) -> pl.DataFrame:
    """trace_id, skeleton (unique lines) and n (non-empty lines), as `_lines` defines them, in
    Polars over slices collected in parallel: at full scale this is ~100 MB of text. The
    whitespace pattern rewrites only runs that change, which is most of the speed."""
    lines = (pl.col("thought").str.replace_all(r"\d+", "#").str.replace_all(r"[^\S\n]{2,}|[^\S\n ]", " ")
             .str.split("\n").list.eval(pl.element().str.strip_chars())
             .list.eval(pl.element().filter(pl.element() != "")))
    step = max(1, -(-traces.height // pl.thread_pool_size()))
    parts = [traces.slice(i, step).lazy().select("trace_id", lines.list.unique().alias("skeleton"),
                                                  lines.list.len().cast(pl.Int64).alias("n"))
             for i in range(0, traces.height, step)]
    return pl.concat(pl.collect_all(parts)) if parts else pl.DataFrame(schema={"trace_id": pl.String})


def distances_to_best(top: pl.DataFrame, skeleton: pl.DataFrame) -> dict[str, tuple[float, int]]:
    """structural_distance(best, t) for every trace t of `top` (from top_traces)."""
    ranked = top.join(skeleton, on="trace_id", how="left", maintain_order="left")
    best = ranked.group_by("task_id", maintain_order=True).first().select(
        "task_id", pl.col("skeleton").alias("best_skeleton"), pl.col("n").alias("best_n"))
    shared = pl.col("skeleton").list.set_intersection("best_skeleton").list.len()
    union = pl.col("skeleton").list.set_union("best_skeleton").list.len()
    both = ranked.join(best, on="task_id").select(
        "trace_id", (1.0 - pl.when(union > 0).then(shared / union).otherwise(1.0)).alias("d"),
        (pl.col("n") - pl.col("best_n")).abs().alias("gap"))
    return {t: (d, g) for t, d, g in both.iter_rows()}


def _row(arm: str, target: dict, source: dict, mode: str, gap: float) -> dict:
    return {"arm": arm, "task_id": target["task_id"], "family": target["family"], "level": target["level"],
            "source_task_id": source["task_id"], "source_trace_id": source["trace_id"], "mode": mode, "gap": gap,
            "n_thought_tokens": source["n_thought_tokens"]}


def potential_rows(arm: str, traces: list[dict], score: str, top_k: int, band: float,
                   distance: dict[str, tuple[float, int]]) -> list[dict]:
    """Best by `score` (ties by trace id), then the most distant in-band member of the top k, else
    the second. `distance[trace id]`: its structural distance to the best."""
    top = sorted(traces, key=lambda t: (-t[score], t["trace_id"]))[:top_k]
    best = top[0]
    in_band = [t for t in top[1:] if best[score] - t[score] <= band]
    if in_band:
        second = max(in_band, key=lambda t: (distance[t["trace_id"]], -top.index(t)))
        mode = "near_best_diverse"
    else:
        second, mode = top[1], "fallback_second"
    return [_row(arm, best, best, "best", 0.0), _row(arm, best, second, mode, best[score] - second[score])]


def _nearest(pool: list[dict], length: int, key) -> dict:
    return min(pool, key=lambda t: (abs(t["n_thought_tokens"] - length), key(t)))


def random_rows(traces: list[dict], answer: list[dict], seed: int, arm: str) -> list[dict]:
    """Per answer row: the eligible trace nearest its length, not picked by the answer arm or this arm."""
    used_by_answer = {r["source_trace_id"] for r in answer}
    taken: set[str] = set()
    rows = []
    for a in answer:
        pool = [t for t in traces if t["trace_id"] not in used_by_answer | taken]
        mode = "length_matched"
        if not pool:  # a task with exactly two eligible traces, both in the answer arm
            pool, mode = [t for t in traces if t["trace_id"] not in taken], "fallback_answer_overlap"
        pick = _nearest(pool, a["n_thought_tokens"], lambda t: derive_seed(seed, arm, t["trace_id"]))
        taken.add(pick["trace_id"])
        rows.append(_row(arm, a, pick, mode, 0.0))
    return rows


def success_rows(by_task: dict[str, list[dict]], answer: list[dict], target_rows: int, arm: str) -> list[dict]:
    """R1-successful traces nearest each answer length (up to two per task), then round-robin repeats."""
    base, taken = [], set()
    for a in answer:
        pool = [t for t in by_task[a["task_id"]] if t["r1_success"] and t["trace_id"] not in taken]
        if pool:
            pick = _nearest(pool, a["n_thought_tokens"], lambda t: t["trace_id"])
            taken.add(pick["trace_id"])
            base.append(_row(arm, pick, pick, "nearest_success", 0.0))
    if not base:
        raise BalanceError(f"{arm}: no R1-successful eligible trace in any retained task; the arm cannot be built")
    repeats = [{**base[i % len(base)], "mode": "repeat"} for i in range(target_rows - len(base))]
    return base + repeats


def shuffle_rows(answer: list[dict], arm: str) -> list[dict]:
    """Within (family, level): the answer multiset onto the answer slots, minimum total length gap,
    never a trace on its own task. Target fields describe the slot; `source_*` the trained trace."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for a in answer:
        groups[(a["family"], a["level"])].append(a)
    rows = []
    for (family, level), slots in sorted(groups.items()):
        cost = [[None if s["task_id"] == src["task_id"] else abs(s["n_thought_tokens"] - src["n_thought_tokens"])
                 for src in slots] for s in slots]
        try:
            col = min_cost_assignment(cost)
        except InfeasibleAssignmentError as exc:
            raise BalanceError(f"{arm}: ({family}, L{level}) has no assignment that keeps every "
                               f"trace off its own task ({len(slots)} slots)") from exc
        for i, (slot, j) in enumerate(zip(slots, col)):
            src = slots[j]
            rows.append({**_row(arm, slot, {"task_id": src["source_task_id"], "trace_id": src["source_trace_id"],
                                            "n_thought_tokens": src["n_thought_tokens"]},
                                 "shuffle", src["gap"]),
                         "target_trace_id": slot["source_trace_id"], "source_mode": src["mode"],
                         "length_cost": cost[i][j]})
    return rows


def _shortest(spec: ArmSpec, traces: list[dict]) -> list[dict]:
    shortest = sorted(traces, key=lambda t: (t["n_thought_tokens"], t["trace_id"]))[:ROWS_PER_TASK]
    return [_row(spec.name, t, t, "shortest", 0.0) for t in shortest]


# rule -> (spec, one task's traces, the rows chosen for it so far, seed, top_k, band, distances) -> rows
TASK_RULES = {
    "potential": lambda spec, traces, chosen, seed, top_k, band, distance: potential_rows(
        spec.name, traces, spec.score, top_k, band, distance[spec.score]),
    "random": lambda spec, traces, chosen, seed, top_k, band, distance: random_rows(
        traces, chosen[spec.matched_to], seed, spec.name),
    "shortest": lambda spec, traces, chosen, seed, top_k, band, distance: _shortest(spec, traces),
}

# rule -> (spec, each task's eligible traces, every arm's rows so far, rows the arm must hold) -> rows:
# the rules that choose across tasks, from the rows of the arm they are matched to
CROSS_TASK_RULES = {
    "success": lambda spec, by_task, arms, want: success_rows(by_task, arms[spec.matched_to], want, spec.name),
    "shuffle": lambda spec, by_task, arms, want: shuffle_rows(arms[spec.matched_to], spec.name),
}


def select_arms(candidates: pl.DataFrame, *, seed: int, top_k: int = 12, band: float = 0.25,
                per_cell: int | None = None) -> dict[str, pl.DataFrame]:
    """Input columns: task_id, family, level, trace_id, thought, n_thought_tokens, eligible,
    answer_gain, joint_gain, r1_success. Tasks with fewer than two eligible traces are excluded
    from every arm alike. Returns one frame per arm; raises BalanceError before returning if any
    arm breaks two rows per retained task (success_rft: the same total) or, given `per_cell`,
    if any (family, level) cell of the candidates does not retain exactly `per_cell` tasks."""
    eligible = candidates.filter("eligible")
    scores = dict.fromkeys(a.score for a in ARM_TABLE if a.score)  # answer_gain, joint_gain
    tops = {score: top_traces(eligible, score, top_k) for score in scores}
    skeleton = skeletons(eligible.join(pl.concat(tops.values()), on="trace_id", how="semi"))  # each text once
    distance = {score: distances_to_best(top, skeleton) for score, top in tops.items()}
    by_task: dict[str, list[dict]] = defaultdict(list)
    for t in eligible.drop("thought").sort("task_id", "trace_id").to_dicts():  # texts stay in Polars
        by_task[t["task_id"]].append(t)
    retained = sorted(t for t, rows in by_task.items() if len(rows) >= ROWS_PER_TASK)
    if per_cell is not None:
        _assert_cells(candidates, retained, per_cell)
    arms: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    for task in retained:  # the rules that choose within one task, in the table's order
        chosen: dict[str, list[dict]] = {}
        for spec in ARM_TABLE:
            if spec.rows in TASK_RULES:
                chosen[spec.name] = TASK_RULES[spec.rows](spec, by_task[task], chosen, seed, top_k, band, distance)
                arms[spec.name] += chosen[spec.name]
    for spec in ARM_TABLE:  # then the rules that choose across tasks, in the table's order
        if spec.rows in CROSS_TASK_RULES:
            arms[spec.name] = CROSS_TASK_RULES[spec.rows](spec, by_task, arms, ROWS_PER_TASK * len(retained))
    thoughts = eligible.select(pl.col("trace_id").alias("source_trace_id"), "thought")
    frames = {arm: pl.DataFrame(rows, infer_schema_length=None).join(thoughts, on="source_trace_id", how="left",
                                                                     maintain_order="left")
              for arm, rows in arms.items()}
    _assert_balance(frames, retained)
    return frames


def _assert_cells(candidates: pl.DataFrame, retained: list[str], per_cell: int) -> None:
    """The configured tasks per (family, level) cell, all retained: a dropped task breaks its cell."""
    expected = {cell: per_cell for cell in tasks_per_cell(candidates)}
    problems = cell_problems(tasks_per_cell(candidates.filter(pl.col("task_id").is_in(retained))), expected,
                             "retained tasks")
    problems += cell_problems(tasks_per_cell(candidates), expected)
    if problems:
        raise BalanceError(f"cells without {per_cell} retained tasks (fewer than {ROWS_PER_TASK} eligible traces "
                           f"or missing tasks): {'; '.join(problems)}; nothing was written")


def _assert_balance(frames: dict[str, pl.DataFrame], retained: list[str]) -> None:
    want = ROWS_PER_TASK * len(retained)
    for arm, frame in frames.items():
        if frame.height != want:
            raise BalanceError(f"{arm}: {frame.height} rows, expected {want} (2 x {len(retained)} retained tasks)")
        if not ARM[arm].balanced:
            continue
        per_task = dict(frame.group_by("task_id").len().iter_rows())
        bad = sorted(t for t in retained if per_task.get(t) != ROWS_PER_TASK)
        if bad or set(per_task) != set(retained):
            raise BalanceError(f"{arm}: tasks {bad[:5]} do not hold exactly {ROWS_PER_TASK} rows")
