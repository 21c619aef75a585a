"""The text protocol of the snapshot a run uses, read from its own chat template.

x is the snapshot's chat template rendering a user turn with its generation prompt, then the
thought's open line (when the template does not write it); z follows; the boundary b is the
thought's close and the answer marker; y* and the template's end of turn close the record. The
markers are profile settings (`protocol`: core/config/sections/protocol.py `Markers`), defaulting to
Qwen's `<think>` / `</think>` / "\\n\\nANSWER:" that core/protocol.py writes for the embedded model.

`derive` finds the user's words and the assistant's content inside two renderings made with
sentinels, so x and the end of turn are the template's own text; `require_prompts` then renders
every task's prompt through the template and refuses a prompt it does not render as
`head + prompt + tail`. A template that cannot hold the protocol is refused by name.

One protocol is active per process (`use`): the experiment resource binds the run's when it
loads the config. Span location checks that the tokenizer it is handed renders as the active
protocol says, so a process that forgot to bind fails loudly instead of training on a
different format.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from functools import cache

from apsft_dagster.core import protocol as qwen
from apsft_dagster.core.config import Markers
from apsft_dagster.core.errors import ModelDirectoryError
from apsft_dagster.core.protocol import SEGMENTS, Spans
from apsft_dagster.core.tasks.answers import normalize_answer

USER, REPLY = "APSFT-USER-5f0c", "APSFT-REPLY-5f0c"  # sentinels no template trims or rewrites
PROBE = "What is 2 + 3?"


@dataclass(frozen=True)
class TextProtocol:
    head: str  # the template's text before the user's words
    tail: str  # after them: the end of the user turn, the generation prompt, the thought's open line
    think_open: str
    think_close: str
    answer_marker: str
    end: str  # the template's end of the assistant's turn
    source: str = "core/protocol.py (Qwen ChatML, the embedded model's)"
    template_opens: bool = True  # the template's generation prompt opens the thought itself (Qwen3.5's)

    @property
    def boundary(self) -> str:
        return self.think_close + self.answer_marker

    @property
    def stop(self) -> tuple[str, str]:
        """Generation stops at the model's own thought close (never forced) or at its end of turn."""
        return self.think_close, self.end

    @property
    def answer_tag(self) -> str:
        """The answer marker as the parser finds it (Qwen's "ANSWER:")."""
        return self.answer_marker.strip()

    def parse_answer(self, completion: str) -> str | None:
        """core/tasks/answers.py's `parse_answer` with this protocol's tag and end of turn: the normalized text
        after the last tag up to the line end; None when absent or empty."""
        at = completion.rfind(self.answer_tag)
        if at < 0:
            return None
        tail = completion[at + len(self.answer_tag):].split(self.end, 1)[0].strip().split("\n", 1)[0]
        return normalize_answer(tail) or None

    def format_prompt(self, prompt: str) -> str:
        return self.head + prompt + self.tail

    def format_record(self, prompt: str, thought: str, answer: str) -> str:
        return self.format_prompt(prompt) + thought + self.boundary + qwen.format_answer(answer) + self.end

    def prompt_ids(self, tokenizer, prompt: str) -> tuple[int, ...]:
        self.require_tokenizer(tokenizer)
        return tuple(tokenizer(self.format_prompt(prompt), add_special_tokens=False)["input_ids"])

    def locate_spans(self, tokenizer, prompt_text: str, thought: str, answer_text: str, end: str = "") -> Spans:
        """core/protocol.py's `locate_spans` with this protocol's boundary: the record tokenized once,
        each token in the segment holding its first character (no source character: prompt)."""
        self.require_tokenizer(tokenizer)
        text = prompt_text + thought + self.boundary + answer_text + end
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        cuts, at = [], 0
        for piece in (prompt_text, thought, self.boundary, answer_text):
            at += len(piece)
            cuts.append(at)
        counts = [0] * len(SEGMENTS)
        for start, stop in enc["offset_mapping"]:
            counts[0 if stop == 0 else bisect_right(cuts, start)] += 1
        bounds, at = [], 0
        for n in counts:
            bounds.append(range(at, at + n))
            at += n
        return Spans(list(enc["input_ids"]), *bounds)

    def require_tokenizer(self, tokenizer) -> None:
        """The tokenizer's template renders a user turn as this protocol's x (checked once per tokenizer)."""
        template = getattr(tokenizer, "chat_template", None)
        if not template or getattr(tokenizer, "_apsft_protocol", None) is self:
            return
        rendered = render_user(tokenizer, PROBE)
        if not self.format_prompt(PROBE).startswith(rendered):
            raise ModelDirectoryError(f"{getattr(tokenizer, 'name_or_path', 'a tokenizer')}: its chat template renders "
                                      f"{rendered!r}, but this process's text protocol ({self.source}) writes "
                                      f"{self.format_prompt(PROBE)!r}: bind the run's protocol first "
                                      "(core/text_protocol.py use / for_config)")
        tokenizer._apsft_protocol = self


DEFAULT = TextProtocol(head=f"{qwen.IM_START}user\n",
                       tail=f"{qwen.IM_END}\n{qwen.IM_START}assistant\n{qwen.THINK_OPEN}\n",
                       think_open=qwen.THINK_OPEN, think_close=qwen.THINK_CLOSE,
                       answer_marker=qwen.BOUNDARY.removeprefix(qwen.THINK_CLOSE), end=qwen.IM_END)
_active = [DEFAULT]


def use(protocol: TextProtocol) -> TextProtocol:
    """Make `protocol` this process's (the run's) and return it."""
    _active[0] = protocol
    return protocol


def active() -> TextProtocol:
    return _active[0]


def render_user(tokenizer, prompt: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                         add_generation_prompt=True)


def _split_once(text: str, sentinel: str, what: str, where: str) -> tuple[str, str]:
    if text.count(sentinel) != 1:
        raise ModelDirectoryError(f"{where}: the chat template does not write {what} once, verbatim (it rendered "
                                  f"{text!r}); the protocol needs the words as given: choose a snapshot whose "
                                  "template keeps them")
    before, after = text.split(sentinel)
    return before, after


def derive(tokenizer, markers, where: str) -> TextProtocol:
    """The protocol of a snapshot's tokenizer and the profile's markers (`protocol` section);
    ModelDirectoryError naming the snapshot and what its template cannot hold."""
    if not getattr(tokenizer, "chat_template", None):
        raise ModelDirectoryError(f"{where}: no chat template (chat_template.jinja or tokenizer_config.json's "
                                  "chat_template); the protocol's prompt is the template's rendering of a user turn")
    if not markers.answer_marker.strip():
        raise ModelDirectoryError(f"{where}: protocol.answer_marker {markers.answer_marker!r} holds no text for the "
                                  "answer parser to find; declare one such as '\\n\\nANSWER:'")
    head, tail = _split_once(render_user(tokenizer, USER), USER, "the user's words", where)
    opened = markers.think_open + "\n"
    if markers.think_close in tail:
        raise ModelDirectoryError(f"{where}: the chat template's generation prompt {tail!r} already closes the "
                                  f"thought ({markers.think_close!r}): it renders thinking off; the protocol needs the "
                                  "model to write its own thought (use a template with thinking on)")
    template_opens = tail.endswith(opened)
    tail = tail if template_opens else tail + "\n" if tail.endswith(markers.think_open) else tail + opened
    conversation = [{"role": "user", "content": USER}, {"role": "assistant", "content": REPLY}]
    whole = tokenizer.apply_chat_template(conversation, tokenize=False)
    _, after = _split_once(whole, REPLY, "the assistant's content", where)
    end = markers.end if markers.end is not None else after.rstrip()
    if not end:
        raise ModelDirectoryError(f"{where}: the chat template writes nothing after the assistant's content "
                                  f"({after!r}); set protocol.end to the text that ends a turn")
    for name, marker in (("think_open", markers.think_open), ("think_close", markers.think_close), ("end", end)):
        ids = tokenizer.convert_tokens_to_ids(marker)
        if ids is None or ids == tokenizer.unk_token_id:
            raise ModelDirectoryError(f"{where}: protocol.{name} {marker!r} is not one token of this tokenizer: "
                                      "generation stops on it and spans start at it; add it to the snapshot's "
                                      "tokenizer as a special token or declare a marker the tokenizer holds")
    return TextProtocol(head=head, tail=tail, think_open=markers.think_open, think_close=markers.think_close,
                        answer_marker=markers.answer_marker, end=end, source=f"the chat template of {where}",
                        template_opens=template_opens)


def require_prompts(protocol: TextProtocol, tokenizer, prompts: dict[str, str]) -> None:
    """Every task's prompt (task id -> prompt) renders through the template as the protocol's x."""
    for task_id, prompt in prompts.items():
        rendered = render_user(tokenizer, prompt)
        if not protocol.format_prompt(prompt).startswith(rendered):
            raise ModelDirectoryError(f"task {task_id}: the chat template ({protocol.source}) renders its prompt as "
                                      f"{rendered!r}, not as the protocol's x {protocol.format_prompt(prompt)!r} "
                                      "(a template that trims or rewrites the user's words)")


@cache
def for_snapshot(path: str, markers) -> TextProtocol:
    from transformers import AutoTokenizer

    return derive(AutoTokenizer.from_pretrained(path), markers, path)


def for_config(config) -> TextProtocol:
    """The run's protocol: the embedded model's (core/protocol.py) or the local snapshot's template with the
    profile's markers; bound as this process's."""
    if config.model.source == "embedded":
        return use(DEFAULT)
    from apsft_dagster.core.paths import local_model_dir

    return use(for_snapshot(str(local_model_dir(config.model.path)), config.protocol or Markers()))
