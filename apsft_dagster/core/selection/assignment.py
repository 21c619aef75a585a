"""Exact minimum-cost assignment (Hungarian algorithm, O(n^3)) with forbidden edges.

Used by the `potential_shuffle` arm: every slot gets exactly one source, total cost minimal,
and a forbidden edge (a trace on its own task) is never used. `None` marks a forbidden edge.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from apsft_dagster.core.errors import InfeasibleAssignmentError


def min_cost_assignment(cost: Sequence[Sequence[float | None]]) -> list[int]:
    """`cost[i][j]`: cost of giving row i column j (square). Returns col[i] for every row i."""
    n = len(cost)
    big = 1 + sum(max((c for c in row if c is not None), default=0) for row in cost) * 2
    a = [[big * n if c is None else c for c in row] for row in cost]
    # Potentials u (rows), v (columns); p[j] = row matched to column j (1-based, 0 = free).
    u, v, p, way = [0.0] * (n + 1), [0.0] * (n + 1), [0] * (n + 1), [0] * (n + 1)
    for i in range(1, n + 1):
        p[0], j0 = i, 0
        minv, used = [math.inf] * (n + 1), [False] * (n + 1)
        while p[j0]:
            used[j0], i0, delta, j1 = True, p[j0], math.inf, 0
            for j in range(1, n + 1):
                if not used[j]:
                    cur = a[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(n + 1):
                if used[j]:
                    u[p[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
        while j0:
            j1 = way[j0]
            p[j0] = p[j1]
            j0 = j1
    col = [0] * n
    for j in range(1, n + 1):
        col[p[j] - 1] = j - 1
    if any(cost[i][col[i]] is None for i in range(n)):
        raise InfeasibleAssignmentError("no assignment avoids every forbidden edge")
    return col
