"""Loss-mask rules: which assistant turns of a trace row must not be trained on, and why.

A row's assistant turns are judged one by one; each flagged turn gets the set of reasons that
apply (several may). Turns a rule looked at and deliberately kept are reported by `left_alone`
so the census can count them. A row that is itself malformed raises `LossMaskError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from apsft_dagster.core.errors import ApsftError
from apsft_dagster.core.loss_mask import terminus
from apsft_dagster.core.loss_mask.tool_calls import has_bad_call, tool_validators

TERMINUS_JSON = "terminus-json"
STALL = "stall"
FALSE_CLAIM = "false-claim"
TOOLCALL_SYNTAX = "toolcall-syntax"
PROSE_COMMAND = "prose-command"
FALSE_CLAIM_WITH_COMMAND = "false_claim_with_command"
PROSE_ONLY = "prose_only"

HARNESSES = frozenset({"terminus2", "mini_swe", "tool_calling"})
ROLES = frozenset({"system", "user", "assistant", "tool"})
DEFAULT_PROSE_COMMANDS = frozenset(
    "ls cd cat grep find python python3 pip git sed awk echo pytest make mkdir rm cp mv".split()
)

# mini_swe executes only fenced ```bash / ```sh blocks; an unclosed fence is not a block.
_SHELL_BLOCK = re.compile(r"```(?:bash|sh)[ \t]*\r?\n.*?```", re.DOTALL)
_PROMPT_LINE = re.compile(r"^[ \t]*\$ +\S", re.MULTILINE)
_INLINE_SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


class LossMaskError(ApsftError, ValueError):
    """A trace row does not have the shape the loss-mask rules read (fail closed)."""


def _failer(row_id: object) -> Callable[[str, str], LossMaskError]:
    def fail(field: str, problem: str) -> LossMaskError:
        return LossMaskError(
            f"row {row_id!r}: field {field!r} {problem}; fix the row in the trace export"
        )

    return fail


def _check_row(row: object) -> tuple[Callable[[str, str], LossMaskError], list[int]]:
    """Validate the fields the rules read; return the row's error builder and its assistant
    message indices (one pass over the messages: this runs on every row of a file)."""
    if not isinstance(row, dict):
        raise LossMaskError(f"a row must be a JSON object, got {type(row).__name__}")
    fail = _failer(row.get("row_id"))
    if not isinstance(row.get("row_id"), str):
        raise fail("row_id", "must be a string")
    if "harness" in row and (not isinstance(row["harness"], str) or row["harness"] not in HARNESSES):
        raise fail("harness", f"must be one of {sorted(HARNESSES)} (or absent), got {row['harness']!r}")
    verifier = row.get("verifier", {"family": ""})
    if not isinstance(verifier, dict) or not isinstance(verifier.get("family"), str):
        raise fail("verifier", "must be an object with a string 'family' (or absent)")
    messages = row.get("messages")
    if not isinstance(messages, list):
        raise fail("messages", "must be a list of messages")
    assistant = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise fail(f"messages[{i}]", "must be an object")
        role = message.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise fail(f"messages[{i}].role", f"must be one of {sorted(ROLES)}, got {role!r}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise fail(f"messages[{i}].content", "must be a string or null")
        calls = message.get("tool_calls")
        if calls is not None and not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            raise fail(f"messages[{i}].tool_calls", "must be a list of objects")
        if role == "assistant":
            assistant.append(i)
    return fail, assistant


def _is_blank(content: str | None) -> bool:
    return content is None or not content.strip()


def _prose_verdict(content: str, commands: frozenset[str]) -> str:
    """PROSE_COMMAND when the text spells a command the harness will never run, else PROSE_ONLY."""
    if _PROMPT_LINE.search(content):
        return PROSE_COMMAND
    for span in _INLINE_SPAN.findall(content):
        words = span.split()
        if words and words[0] in commands:
            return PROSE_COMMAND
    return PROSE_ONLY


def rules_run(row: dict) -> tuple[frozenset[str], frozenset[str]]:
    """(the rules that run on this row, the rules that cannot for want of a field): stall always;
    toolcall-syntax on rows with `tools`; terminus-json and false-claim need harness terminus2,
    false-claim also a `verifier`; prose-command needs mini_swe. A row with no `harness` skips the
    three harness rules; a terminus2 row with no `verifier` skips false-claim."""
    harness = row.get("harness")
    ran = {STALL} | ({TOOLCALL_SYNTAX} if row.get("tools") is not None else set())
    if harness is None:
        return frozenset(ran), _NEED_HARNESS
    if harness == "terminus2":
        ran |= {TERMINUS_JSON, FALSE_CLAIM} if "verifier" in row else {TERMINUS_JSON}
        return frozenset(ran), frozenset() if "verifier" in row else frozenset({FALSE_CLAIM})
    return frozenset(ran | ({PROSE_COMMAND} if harness == "mini_swe" else set())), frozenset()


_NEED_HARNESS = frozenset({TERMINUS_JSON, FALSE_CLAIM, PROSE_COMMAND})


def judge_row(
    row: dict, *, known_broken_families: frozenset[str] = frozenset(), prose_commands: frozenset[str] | None = None
) -> tuple[dict[int, frozenset[str]], dict[int, frozenset[str]], int]:
    """(flagged, left_alone, assistant turns) in one pass: message index -> reasons, non-empty sets only."""
    known_broken_families = frozenset(known_broken_families)
    fail, assistant = _check_row(row)
    harness, messages = row.get("harness"), row["messages"]
    by_name = tool_validators(row["tools"], fail) if row.get("tools") is not None else None
    commands = DEFAULT_PROSE_COMMANDS if prose_commands is None else prose_commands
    flagged: dict[int, frozenset[str]] = {}
    kept: dict[int, frozenset[str]] = {}
    for i in assistant:
        message = messages[i]
        content, calls = message.get("content"), message.get("tool_calls") or []
        blank = _is_blank(content)
        reasons: set[str] = set()
        spared: set[str] = set()
        if blank and not calls:
            reasons.add(STALL)
        if by_name is not None and calls and has_bad_call(calls, by_name):
            reasons.add(TOOLCALL_SYNTAX)
        if harness == "terminus2":
            is_last = i == assistant[-1]
            _judge_terminus(content, is_last, row.get("verifier"), known_broken_families, reasons, spared)
        elif harness == "mini_swe" and not calls and not blank and not _SHELL_BLOCK.search(content):
            verdict = _prose_verdict(content, commands)
            (reasons if verdict == PROSE_COMMAND else spared).add(verdict)
        if reasons:
            flagged[i] = frozenset(reasons)
        if spared:
            kept[i] = frozenset(spared)
    return flagged, kept, len(assistant)


def _judge_terminus(
    content: str | None,
    is_last: bool,
    verifier: dict | None,
    known_broken_families: frozenset[str],
    reasons: set[str],
    spared: set[str],
) -> None:
    action = terminus.parse_action(content)
    if action is None or not terminus.is_valid_action(action):
        reasons.add(TERMINUS_JSON)
    if action is None:
        return
    if terminus.stalls(action):
        reasons.add(STALL)
    # Only the final claim is judged against the verifier: earlier turns were not the answer.
    if is_last and verifier is not None and terminus.claims_completion(action):  # no verifier: skipped
        if terminus.is_trusted_failure(verifier, known_broken_families):
            if terminus.has_executable_command(action):
                spared.add(FALSE_CLAIM_WITH_COMMAND)
            else:
                reasons.add(FALSE_CLAIM)


def flag_row(
    row: dict,
    *,
    known_broken_families: frozenset[str] = frozenset(),
    prose_commands: frozenset[str] | None = None,
) -> dict[int, frozenset[str]]:
    """Message index -> reasons to mask it, for flagged assistant messages only."""
    return judge_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)[0]


def left_alone(
    row: dict,
    *,
    known_broken_families: frozenset[str] = frozenset(),
    prose_commands: frozenset[str] | None = None,
) -> dict[int, frozenset[str]]:
    """Message index -> the rules that looked at it and kept it (`false_claim_with_command`,
    `prose_only`); independent of whether another rule flagged the same message."""
    return judge_row(row, known_broken_families=known_broken_families, prose_commands=prose_commands)[1]
