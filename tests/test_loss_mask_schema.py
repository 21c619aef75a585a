"""The compiled terminus action check agrees with jsonschema's Draft 2020-12 validator."""

import itertools

from jsonschema import Draft202012Validator

from apsft_dagster.core.loss_mask.terminus import ACTION_SCHEMA, is_valid_action

VALUES = [None, True, False, 0, -1, 1.5, "", "ls\n", [], [{}], {"x": 1}]


def test_compiled_and_reference_validators_agree_on_every_variant():
    reference = Draft202012Validator(ACTION_SCHEMA)
    checked = disagreements = 0
    commands = [[], [{"keystrokes": k, "duration": d} for k, d in [("ls", 0.5)]]]
    commands += [[{"keystrokes": k}] for k in VALUES] + [[{"keystrokes": "ls", "duration": d}] for d in VALUES]
    commands += [[{"duration": 1}], "ls", None, [["ls"]]]
    for analysis, plan, cmds, complete in itertools.product(VALUES[:8], ["p", 3, None], commands,
                                                             ["absent", True, False, 1, None]):
        action = {"analysis": analysis, "plan": plan, "commands": cmds, "extra": 1}
        if plan is None:
            del action["plan"]
        if complete != "absent":
            action["task_complete"] = complete
        checked += 1
        disagreements += is_valid_action(action) != reference.is_valid(action)
    assert checked > 2000 and disagreements == 0
