"""One SFT row as a trainer reads it: chat messages that render to the training record, and the
record's tokens with the loss weight of each (docs/export-arms.md).

The assistant turn is cut from the training record itself (the run's text protocol's `format_record`:
core/text_protocol.py): whatever follows what the base model's chat template writes before a reply, up to
the protocol's end of turn.
Rendered back through the same template, the messages must give the record (the template may add
a newline after the end of turn); a row that does not is refused, so the messages never carry a
text other than the one apsft trains on. The weights come from one call into the training loss
(`loss.token_weights`), never from span logic of our own.
"""

from __future__ import annotations

from apsft_dagster.core.config import LossWeights
from apsft_dagster.core.errors import ExportError
from apsft_dagster.core.protocol import format_answer
from apsft_dagster.core.text_protocol import TextProtocol, render_user
from apsft_dagster.core.training.loss import token_weights

SENTINEL = "\x00apsft-assistant-turn\x00"  # stands in for the assistant content to find the template's header
PROVENANCE = ("row", "task_id", "source_trace_id", "family", "level", "mode")  # copied from the arm's rows


def render(tokenizer, messages: list[dict]) -> str:
    return tokenizer.apply_chat_template(messages, tokenize=False)


def chat_messages(tokenizer, protocol: TextProtocol, prompt: str, thought: str, answer: str,
                  where: str) -> list[dict]:
    """[user: the prompt, assistant: the record after what the template writes before a reply, end of turn
    excluded]. What precedes a reply is read from the template two ways: what it writes before an assistant
    message's content as given (ChatML, Llama, Gemma, Mistral), and its generation prompt, for a template that
    writes a thought block of its own around a reply that has none (Qwen3's); the first whose messages render
    back to the record is taken."""
    record = protocol.format_record(prompt, thought, answer)
    user = [{"role": "user", "content": prompt}]
    headers = (render(tokenizer, [*user, {"role": "assistant", "content": SENTINEL}]).split(SENTINEL, 1)[0],
               render_user(tokenizer, prompt))
    for header in dict.fromkeys(h for h in headers if record.startswith(h)):
        messages = [*user, {"role": "assistant", "content": record[len(header):len(record) - len(protocol.end)]}]
        if render(tokenizer, messages).startswith(record):
            return messages
    raise ExportError(f"{where}: the base model's chat template writes {headers[0][-60:]!r} before the assistant "
                      "turn, and no assistant content renders back to the training record apsft trains on under "
                      "it; refused, nothing written (the template and the protocol markers must agree: "
                      "docs/export-arms.md)")


def export_row(tokenizer, protocol: TextProtocol, row: dict, loss_weights: LossWeights, where: str) -> dict:
    """messages, input_ids, loss_weights (0 prompt / thought / boundary+answer+end, per the config),
    completion_mask (1 where the weight is above 0) and the row's provenance."""
    prompt, thought, answer = row["prompt"], row["thought"], row["answer"]
    ids, weights = token_weights(tokenizer, protocol.format_prompt(prompt), thought, format_answer(answer),
                                 protocol.end, loss_weights=loss_weights)
    messages = chat_messages(tokenizer, protocol, prompt, thought, answer, where)
    return {**{k: row[k] for k in PROVENANCE}, "messages": messages,
            "input_ids": list(ids), "loss_weights": [float(w) for w in weights],
            "completion_mask": [int(w > 0) for w in weights]}
