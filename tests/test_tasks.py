import re

import pytest

from apsft_dagster.core.errors import TaskGenerationError
from apsft_dagster.core.tasks import BUILDERS, STEPS_BY_LEVEL, generate, is_correct, normalize_answer, parse_answer
from solvers import SOLVERS

FAMILIES = sorted(BUILDERS)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_canonical_answer_matches_independent_solver(family, level):
    for index in range(150):
        task = generate(family, level, index, seed=1234)
        assert SOLVERS[family](task.prompt) == task.answer, (family, level, index, task.prompt)


@pytest.mark.parametrize("family", FAMILIES)
def test_worked_solution_has_one_line_per_step_and_ends_on_the_answer(family):
    for level, steps in STEPS_BY_LEVEL.items():
        task = generate(family, level, 3, seed=9)
        lines = task.solution.splitlines()
        # a start line + one line per operation + a closing line that states the answer
        assert len(lines) == steps + 2
        assert task.answer in lines[-1]


def test_levels_increase_reasoning_steps():
    for family in FAMILIES:
        lengths = [len(generate(family, level, 0, 5).solution.splitlines()) for level in (1, 2, 3, 4)]
        assert lengths == sorted(lengths) and len(set(lengths)) == 4


def test_generation_is_a_pure_function_of_its_arguments():
    assert generate("runeward", 2, 7, 11) == generate("runeward", 2, 7, 11)
    assert generate("runeward", 2, 7, 11).prompt != generate("runeward", 2, 7, 12).prompt


def test_families_are_structurally_distinct():
    answers = {f: [generate(f, 2, i, 3).answer for i in range(50)] for f in FAMILIES}
    assert all(re.fullmatch(r"\d+:\d+", a) for a in answers["brinework"])
    assert all(re.fullmatch(r"\d+", a)
               for f in ("caravan", "foundry_ledger", "runeward", "spindle") for a in answers[f])


def test_unknown_family_or_level_is_a_clear_error():
    with pytest.raises(TaskGenerationError, match="family 'nope' is unknown"):
        generate("nope", 1, 0, 0)
    with pytest.raises(TaskGenerationError, match="level 7"):
        generate("caravan", 7, 0, 0)


@pytest.mark.parametrize("text, expected", [
    ("Stop: 9.\n</think>\n\nANSWER: 24<|im_end|>", "24"),
    ("ANSWER: 1\nANSWER:  +007 .", "7"),
    ("ANSWER: rkl rr", "RKLRR"),
    ("ANSWER: 06 : 14", "6:14"),
    ("no tag here", None),
    ("ANSWER:   <|im_end|>", None),
])
def test_parse_answer(text, expected):
    assert parse_answer(text) == expected


def test_is_correct_uses_the_normalized_form():
    assert is_correct("</think>\n\nANSWER: 11:17.", normalize_answer("11:17"))
    assert not is_correct("</think>\n\nANSWER: 11:18", "11:17")
