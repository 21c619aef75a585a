"""Loss-mask rules on hand-built rows: every rule's positive case, its near misses, the
left-alone cases the census counts, malformed rows, and a seeded planted-defect sweep."""

import json
import random

import pytest

from apsft_dagster.core.loss_mask import (
    DEFAULT_PROSE_COMMANDS,
    LossMaskError,
    flag_row,
    left_alone,
)

TJ, ST, FC, TS, PC = "terminus-json", "stall", "false-claim", "toolcall-syntax", "prose-command"
TRUSTED_FAIL = {"passed": False, "reward": 0.0, "infra_exception": False, "family": "build"}
PASSED = {"passed": True, "reward": 1.0, "infra_exception": False, "family": "build"}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
    "required": ["city"]}}}]


def row(harness, *assistant, verifier=PASSED, tools=None, head=None):
    """system + user, then each assistant message; the indexes of those messages are 2, 3, ..."""
    messages = head or [{"role": "system", "content": "Be an agent."}, {"role": "user", "content": "Go."}]
    messages = messages + [a if isinstance(a, dict) else {"role": "assistant", "content": a} for a in assistant]
    out = {"row_id": "r-1", "source": "s", "harness": harness, "messages": messages, "verifier": verifier}
    if tools is not None:
        out["tools"] = tools
    return out


def action(commands=(("ls -la\n", 0.1),), **extra):
    body = {"analysis": "a", "plan": "p", "commands": [{"keystrokes": k, "duration": d} for k, d in commands]}
    return json.dumps({**body, **extra})


def flags_of_one(harness, content, **kw):
    """Reasons for a single assistant message at index 2 (empty set when not flagged)."""
    return flag_row(row(harness, content, **kw)).get(2, frozenset())


# --- terminus-json -------------------------------------------------------------------------

@pytest.mark.parametrize("content", [
    action(),
    "```json\n" + action() + "\n```",
    "  \n```json\n" + action() + "\n```\n  ",
    "\n " + action() + " \n",
    action(task_complete=False, extra_key={"free": "form"}),  # extra keys are allowed
    action(commands=(("ls\n", 0),)),  # duration 0 is non-negative
    json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\n"}]}),  # no duration
])
def test_valid_actions_are_not_flagged(content):
    assert flags_of_one("terminus2", content) == frozenset()


@pytest.mark.parametrize("content", [
    action() + action(),  # two objects
    action() + "\nNow I run it.",  # trailing prose
    "Here is my action: " + action(),  # leading prose
    "```\n" + action() + "\n```",  # a fence that is not ```json
    "```json\n" + action() + "\n```\n```json\n" + action() + "\n```",  # two fenced objects
    json.dumps({"analysis": "a", "commands": [{"keystrokes": "ls\n"}]}),  # missing plan
    json.dumps({"analysis": 1, "plan": "p", "commands": [{"keystrokes": "ls\n"}]}),  # analysis not str
    json.dumps({"analysis": "a", "plan": "p", "commands": [{"keystrokes": 5}]}),  # keystrokes not str
    json.dumps({"analysis": "a", "plan": "p", "commands": [{"duration": 1}]}),  # keystrokes missing
    json.dumps({"analysis": "a", "plan": "p", "commands": ["ls"]}),  # command not an object
    json.dumps({"analysis": "a", "plan": "p", "commands": "ls"}),  # commands not a list
    action(commands=(("ls\n", -1),)),  # negative duration
    action(commands=(("ls\n", True),)),  # a boolean is not a number
    action(commands=(("ls\n", "1"),)),  # a string is not a number
    action(task_complete="yes"),  # task_complete must be boolean
    action(task_complete=1),
    '{"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls", "duration": NaN}]}',  # not JSON
    "[" + action() + "]",  # a list, not an object
    '{"analysis": "a", "plan": ',  # truncated
])
def test_not_one_valid_action_is_terminus_json(content):
    assert flags_of_one("terminus2", content) == {TJ}


def test_null_content_is_not_a_json_object_and_without_tool_calls_also_a_stall():
    assert flags_of_one("terminus2", None) == {TJ, ST}


def test_whitespace_content_is_both_not_a_json_object_and_a_stall():
    assert flags_of_one("terminus2", " \n\t ") == {TJ, ST}
    assert flags_of_one("terminus2", "") == {TJ, ST}


def test_terminus_json_is_terminus2_only():
    assert flags_of_one("tool_calling", "not json at all") == frozenset()
    assert flags_of_one("mini_swe", "not json at all") == frozenset()


# --- stall -----------------------------------------------------------------------------------

@pytest.mark.parametrize("harness", ["terminus2", "mini_swe", "tool_calling"])
def test_null_content_with_tool_calls_is_not_a_stall(harness):
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    assert ST not in flags_of_one(harness, message, tools=TOOLS)


@pytest.mark.parametrize("harness", ["mini_swe", "tool_calling"])
def test_blank_content_without_tool_calls_is_a_stall_in_every_harness(harness):
    assert flags_of_one(harness, "   \n") == {ST}
    assert flags_of_one(harness, None) == {ST}
    assert flags_of_one(harness, {"role": "assistant", "content": "", "tool_calls": []}) == {ST}


def test_parsed_action_without_commands_key_stalls_even_if_complete():
    assert flags_of_one("terminus2", json.dumps({"analysis": "a", "plan": "p"})) == {TJ, ST}
    no_commands_done = json.dumps({"analysis": "a", "plan": "p", "task_complete": True})
    assert flags_of_one("terminus2", no_commands_done) == {TJ, ST}


def test_empty_commands_stall_unless_task_complete_is_true():
    assert flags_of_one("terminus2", action(commands=())) == {ST}
    assert flags_of_one("terminus2", action(commands=(), task_complete=False)) == {ST}
    assert flags_of_one("terminus2", action(commands=(), task_complete=True)) == frozenset()


def test_stall_is_judged_on_schema_invalid_objects_too():
    invalid_and_empty = json.dumps({"analysis": "a", "commands": []})  # plan missing
    assert flags_of_one("terminus2", invalid_and_empty) == {TJ, ST}
    assert flags_of_one("terminus2", "```json\n{}\n```") == {TJ, ST}


# --- false-claim -----------------------------------------------------------------------------

CLAIM = action(commands=(("   ", 0.1),), task_complete=True)  # claims done, types nothing
CLAIM_EMPTY = action(commands=(), task_complete=True)
CLAIM_WITH_COMMAND = action(commands=(("echo done\n", 0.1),), task_complete=True)


def test_a_bare_completion_claim_on_a_trusted_failure_is_a_false_claim():
    assert flag_row(row("terminus2", action(), CLAIM, verifier=TRUSTED_FAIL)) == {3: {FC}}
    assert flag_row(row("terminus2", CLAIM_EMPTY, verifier=TRUSTED_FAIL)) == {2: {FC}}


def test_only_the_last_assistant_message_is_judged_against_the_verifier():
    flagged = flag_row(row("terminus2", CLAIM, {"role": "user", "content": "go on"}, action(),
                           verifier=TRUSTED_FAIL))
    assert flagged == {}
    trailing_user = row("terminus2", CLAIM, {"role": "user", "content": "thanks"}, verifier=TRUSTED_FAIL)
    assert flag_row(trailing_user) == {2: {FC}}  # last *assistant* message, not last message


@pytest.mark.parametrize("toggle", [
    {"passed": None}, {"passed": True}, {"passed": 0},
    {"reward": True}, {"reward": False}, {"reward": None}, {"reward": "0"},
    {"infra_exception": True}, {"infra_exception": None}, {"infra_exception": 0},
])
def test_an_untrusted_verdict_never_makes_a_false_claim(toggle):
    verifier = {**TRUSTED_FAIL, **toggle}
    assert flag_row(row("terminus2", CLAIM, verifier=verifier)) == {}
    assert left_alone(row("terminus2", CLAIM_WITH_COMMAND, verifier=verifier)) == {}


def test_integer_reward_is_a_number():
    assert flag_row(row("terminus2", CLAIM, verifier={**TRUSTED_FAIL, "reward": 0})) == {2: {FC}}


def test_a_known_broken_family_is_not_trusted():
    r = row("terminus2", CLAIM, verifier=TRUSTED_FAIL)
    assert flag_row(r, known_broken_families=frozenset({"build"})) == {}
    assert flag_row(r, known_broken_families=frozenset({"other"})) == {2: {FC}}


def test_a_claim_with_an_executable_command_stays_trained_and_is_counted():
    r = row("terminus2", action(), CLAIM_WITH_COMMAND, verifier=TRUSTED_FAIL)
    assert flag_row(r) == {}
    assert left_alone(r) == {3: {"false_claim_with_command"}}
    assert left_alone(row("terminus2", CLAIM, verifier=TRUSTED_FAIL)) == {}


def test_a_claim_that_is_not_one_json_object_is_only_terminus_json():
    assert flag_row(row("terminus2", CLAIM + " done!", verifier=TRUSTED_FAIL)) == {2: {TJ}}


# --- toolcall-syntax ---------------------------------------------------------------------------

def call_message(name, arguments, content=None):
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


@pytest.mark.parametrize("name, arguments", [
    ("get_weather", '{"city": "Oslo"'),  # not JSON
    ("get_weather", ""),
    ("get_weather", '["Oslo"]'),  # JSON, but a list
    ("get_weather", '"Oslo"'),
    ("get_weather", {"city": 7}),  # an object (the HF convention) that fails the schema
    ("get_weather", ["Oslo"]),  # neither a JSON string nor an object
    ("get_forecast", '{"city": "Oslo"}'),  # unknown function
    ("get_weather", '{"city": 7}'),  # wrong type
    ("get_weather", '{"days": 2}'),  # required city missing
    ("get_weather", '{"city": "Oslo", "days": true}'),  # a boolean is not an integer
])
def test_bad_calls_are_toolcall_syntax(name, arguments):
    assert flags_of_one("tool_calling", call_message(name, arguments), tools=TOOLS) == {TS}


def test_a_valid_call_is_not_flagged_and_one_bad_call_taints_the_message():
    good = call_message("get_weather", '{"city": "Oslo", "days": 2}')
    assert flags_of_one("tool_calling", good, tools=TOOLS) == frozenset()
    both = {**good, "tool_calls": good["tool_calls"] + call_message("nope", "{}")["tool_calls"]}
    assert flags_of_one("tool_calling", both, tools=TOOLS) == {TS}


def test_tool_calls_are_not_judged_in_rows_without_tools():
    assert flags_of_one("tool_calling", call_message("anything", "not json")) == frozenset()


def test_a_function_without_parameters_takes_any_object():
    tools = [{"type": "function", "function": {"name": "now"}}]
    assert flags_of_one("tool_calling", call_message("now", "{}"), tools=tools) == frozenset()
    assert flags_of_one("tool_calling", call_message("now", "[]"), tools=tools) == {TS}


# --- prose-command -----------------------------------------------------------------------------

@pytest.mark.parametrize("content", [
    "I will list the files.\n$ ls -la src/",
    "  $ ls",  # an indented prompt line
    "Now search with `grep -rn TODO src` to find the gaps.",
    "Run `pytest` next.",
    "```python\nx = 1\n```\nthen `python3 x.py`",  # a non-shell fence does not count
    "```bash\n$ ls\n",  # an unclosed fence is no block, so its prompt line is prose
])
def test_commands_written_as_prose_are_flagged(content):
    assert flags_of_one("mini_swe", content) == {PC}
    assert left_alone(row("mini_swe", content)) == {}


@pytest.mark.parametrize("content", [
    "The `config` module holds the settings; the fix is complete.",
    "Costs $5 in total.",  # "$" not followed by a space
    "$ ",  # a prompt with nothing after it
    "Use ``ls`` carefully.",  # double backticks are not a single-backtick span
    "The `foo --bar` flag.",
    "The fix is complete.",
])
def test_prose_without_a_command_stays_trained_and_is_counted(content):
    assert flags_of_one("mini_swe", content) == frozenset()
    assert left_alone(row("mini_swe", content)) == {2: {"prose_only"}}


@pytest.mark.parametrize("content", [
    "Let me look.\n$ ls\n```bash\npytest -q tests/\n```",
    "Run `grep x`:\n```sh\ngrep -rn x .\n```",
])
def test_a_fenced_shell_block_means_no_prose_judgement(content):
    assert flags_of_one("mini_swe", content) == frozenset()
    assert left_alone(row("mini_swe", content)) == {}


def test_tool_calls_mean_no_prose_judgement():
    message = call_message("get_weather", '{"city": "Oslo"}', content="$ ls -la")
    assert flags_of_one("mini_swe", message, tools=TOOLS) == frozenset()
    assert left_alone(row("mini_swe", message, tools=TOOLS)) == {}


def test_prose_command_list_is_configurable():
    assert {"ls", "git", "pytest", "mv"} <= DEFAULT_PROSE_COMMANDS
    r = row("mini_swe", "Try `cargo test` now.")
    assert flag_row(r) == {}
    assert flag_row(r, prose_commands=DEFAULT_PROSE_COMMANDS | {"cargo"}) == {2: {PC}}
    assert flag_row(row("mini_swe", "Run `ls`."), prose_commands=frozenset({"cargo"})) == {}


def test_prose_rules_are_mini_swe_only():
    assert flags_of_one("tool_calling", "$ ls -la") == frozenset()
    assert left_alone(row("tool_calling", "plain words")) == {}


# --- assistant messages only, several reasons, malformed rows ------------------------------------

@pytest.mark.parametrize("harness, bad", [
    ("terminus2", "not json"), ("terminus2", "   "), ("mini_swe", "$ ls"), ("tool_calling", ""),
])
@pytest.mark.parametrize("role", ["system", "user", "tool"])
def test_only_assistant_messages_are_ever_flagged(harness, bad, role):
    head = [{"role": role, "content": bad}, {"role": "user", "content": bad}]
    fine = action() if harness == "terminus2" else "```bash\nls\n```"
    assert flag_row(row(harness, fine, head=head)) == {}


def test_a_message_may_carry_several_reasons():
    call = call_message("nope", "{}", content="  ")["tool_calls"]
    # terminus2, whitespace content with a bad tool call: not a JSON object, and a bad call
    message = {"role": "assistant", "content": "  ", "tool_calls": call}
    assert flags_of_one("terminus2", message, tools=TOOLS) == {TJ, TS}
    bare_done = json.dumps({"analysis": "a", "task_complete": True})  # no plan, no commands
    assert flag_row(row("terminus2", bare_done, verifier=TRUSTED_FAIL)) == {2: {TJ, ST, FC}}


@pytest.mark.parametrize("edit, field", [
    (lambda r: r.pop("messages"), "messages"),
    (lambda r: r.update(messages="hi"), "messages"),
    (lambda r: r.update(harness="swe_agent"), "harness"),
    (lambda r: r.pop("row_id"), "row_id"),
    (lambda r: r.update(verifier="passed"), "verifier"),  # absent is allowed (false-claim skipped); wrong is not
    (lambda r: r.update(verifier={"passed": True}), "verifier"),
    (lambda r: r["messages"].append({"role": "robot", "content": "x"}), "messages[3].role"),
    (lambda r: r["messages"].append({"role": "assistant", "content": ["x"]}), "messages[3].content"),
    (lambda r: r["messages"].append({"role": "assistant", "content": "x", "tool_calls": "c"}),
     "messages[3].tool_calls"),
    (lambda r: r["messages"].append("hello"), "messages[3]"),
    (lambda r: r.update(tools={"get_weather": {}}), "tools"),
    (lambda r: r.update(tools=[{"type": "function", "function": {}}]), "tools[0].function.name"),
    (lambda r: r.update(tools=TOOLS + TOOLS), "tools[1].function.name"),
    (lambda r: r.update(tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": 5}}}]),
     "tools[0].function.parameters"),
])
def test_malformed_rows_raise_naming_the_row_and_field(edit, field):
    r = row("terminus2", action())
    edit(r)
    with pytest.raises(LossMaskError) as err:
        flag_row(r)
    assert isinstance(err.value, ValueError)
    message = str(err.value)
    assert f"'{field}'" in message
    if field != "row_id":
        assert "'r-1'" in message


def test_a_row_that_is_not_an_object_raises():
    with pytest.raises(LossMaskError, match="list"):
        flag_row([])


# --- seeded planted-defect sweep -------------------------------------------------------------------

TERMINUS_TEMPLATES = [  # (content, planted reasons)
    (action(), set()), ("```json\n" + action() + "\n```", set()), (action() + "\nok", {TJ}),
    (action(commands=(("ls", -2),)), {TJ}), (action(commands=()), {ST}), ("", {TJ, ST}),
    (json.dumps({"analysis": "a", "plan": "p"}), {TJ, ST}), (action() * 2, {TJ}),
    (CLAIM, set()),  # a bare claim before the last turn is not judged against the verifier
]
MINI_TEMPLATES = [
    ("```bash\nls\n```", set(), None), ("$ ls -la", {PC}, None), ("use `git status`", {PC}, None),
    ("All done.", set(), "prose_only"), (" ", {ST}, None), ("the `foo` bar", set(), "prose_only"),
]
TOOL_TEMPLATES = [
    (call_message("get_weather", '{"city": "Oslo"}'), set()), (call_message("get_weather", "{"), {TS}),
    (call_message("x", "{}"), {TS}), (call_message("get_weather", '{"city": 1}'), {TS}),
    ({"role": "assistant", "content": "Sunny."}, set()), ({"role": "assistant", "content": None}, {ST}),
]
ENDINGS = [  # terminus2 last turn: (content, reasons on a trusted failure, left-alone on one)
    (CLAIM, {FC}, None), (CLAIM_WITH_COMMAND, set(), "false_claim_with_command"), (action(), set(), None),
]


def planted_row(rng, i):
    harness = rng.choice(["terminus2", "mini_swe", "tool_calling"])
    trusted = harness == "terminus2" and rng.random() < 0.5
    pool = {"terminus2": [(c, r, None) for c, r in TERMINUS_TEMPLATES], "mini_swe": MINI_TEMPLATES,
            "tool_calling": [(m, r, None) for m, r in TOOL_TEMPLATES]}[harness]
    turns = [rng.choice(pool) for _ in range(rng.randint(1, 4))]
    if harness == "terminus2":
        content, reasons, alone = rng.choice(ENDINGS)
        turns.append((content, reasons if trusted else set(), alone if trusted else None))
    messages, flags, alone_truth = [{"role": "user", "content": "task"}], {}, {}
    for message, reasons, alone in turns:
        if rng.random() < 0.5:  # interleave a non-assistant message with defective-looking text
            messages.append({"role": rng.choice(["user", "tool"]), "content": rng.choice(["", "$ ls", "{"])})
        if reasons:
            flags[len(messages)] = frozenset(reasons)
        if alone:
            alone_truth[len(messages)] = frozenset({alone})
        messages.append(message if isinstance(message, dict) else {"role": "assistant", "content": message})
    verifier = TRUSTED_FAIL if trusted else {**TRUSTED_FAIL, "passed": rng.choice([True, None])}
    r = {"row_id": f"p-{i}", "source": "synthetic", "harness": harness, "messages": messages,
         "verifier": verifier}
    if harness == "tool_calling":
        r["tools"] = TOOLS
    return r, flags, alone_truth


def test_seeded_rows_get_exactly_the_planted_reasons():
    rng = random.Random(20240611)
    seen = set()
    for i in range(400):
        r, flags, alone_truth = planted_row(rng, i)
        assert flag_row(r) == flags, r
        assert left_alone(r) == alone_truth, r
        seen |= {reason for reasons in flags.values() for reason in reasons}
        seen |= {reason for reasons in alone_truth.values() for reason in reasons}
    assert seen == {TJ, ST, FC, TS, PC, "false_claim_with_command", "prose_only"}
