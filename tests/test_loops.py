import random

import pytest

from apsft_dagster.core.loops import find_loop, is_exact_periodic_loop, prefix_function


def brute_force_loop(ids, min_repeats=4, max_period=512, min_span=64):
    """Every block length p: count whole copies of the last p tokens going backwards."""
    for p in range(1, max_period + 1):
        if p > len(ids):
            break
        block, r = ids[len(ids) - p:], 1
        while (r + 1) * p <= len(ids) and ids[len(ids) - (r + 1) * p:len(ids) - r * p] == block:
            r += 1
        if r >= min_repeats and r * p >= min_span:
            return True
    return False


def _noise(rng, n, vocab=50):
    return [rng.randrange(1000, 1000 + vocab) for _ in range(n)]


@pytest.mark.parametrize("period, repeats", [(1, 64), (7, 10), (300, 4)])
def test_hand_built_periodic_tails_are_flagged(period, repeats):
    rng = random.Random(period)
    block = _noise(rng, period) if period > 1 else [5]
    ids = _noise(rng, 40) + [1] + block * repeats  # the [1] makes the loop start exactly there
    loop = find_loop(ids)
    assert loop is not None and loop.period == period and loop.repeats == repeats
    assert is_exact_periodic_loop(ids)


@pytest.mark.parametrize("period, repeats", [(1, 64), (7, 10), (300, 4)])
def test_one_changed_token_breaks_the_loop(period, repeats):
    rng = random.Random(period)
    block = _noise(rng, period) if period > 1 else [5]
    ids = _noise(rng, 40) + block * repeats
    ids[-(period * 3) - 1] = 999_999  # inside the 4th copy from the end: only 3 whole copies remain
    assert not is_exact_periodic_loop(ids)
    assert not brute_force_loop(ids)


def test_thresholds():
    assert not is_exact_periodic_loop([3] * 63)  # span 63 < 64
    assert is_exact_periodic_loop([3] * 64)
    assert not is_exact_periodic_loop(list(range(20)) * 3)  # 3 repeats only, span 60
    assert is_exact_periodic_loop(list(range(20)) * 4)
    assert not is_exact_periodic_loop(list(range(513)) * 4)  # block longer than 512
    assert is_exact_periodic_loop(list(range(513)) * 4, max_period=513)
    assert not is_exact_periodic_loop([])


def test_non_loops():
    rng = random.Random(0)
    assert not is_exact_periodic_loop(_noise(rng, 5000, vocab=1000))
    assert not is_exact_periodic_loop([1, 2] * 40 + [3])  # the loop is not at the tail
    assert find_loop([1, 2] * 40).period == 2


def test_reports_the_smallest_period():
    loop = find_loop([4, 4, 9, 4, 4, 9] * 30)
    assert loop.period == 3 and loop.repeats == 60


def test_prefix_function_on_a_textbook_case():
    assert prefix_function([ord(c) for c in "abacaba"]) == [0, 0, 1, 0, 1, 2, 3]


def test_agrees_with_brute_force_on_random_sequences():
    rng = random.Random(7)
    for trial in range(400):
        head = _noise(rng, rng.randrange(0, 30), vocab=3)
        block = _noise(rng, rng.randrange(1, 40), vocab=rng.choice([1, 2, 5]))
        ids = head + block * rng.randrange(1, 12)
        if rng.random() < 0.5 and ids:
            ids[rng.randrange(len(ids))] = 7
        kwargs = {"min_repeats": rng.choice([2, 3, 4]), "max_period": rng.choice([5, 50, 512]),
                  "min_span": rng.choice([8, 64])}
        assert is_exact_periodic_loop(ids, **kwargs) == brute_force_loop(ids, **kwargs), (ids, kwargs)
