"""The text protocol read from a snapshot's own chat template: for every family's template style, x is the
template's rendering of the user turn, and the record the protocol writes is what the template itself renders
for the conversation (the assistant's content being the thought opener, thought, boundary and answer); the
spans split that record where its pieces begin. The shipped embedded models give core/protocol.py's protocol."""

import pytest

from apsft_dagster.core.config import Markers
from apsft_dagster.core.embedded.shipped import SHIPPED
from apsft_dagster.core.errors import ModelDirectoryError
from apsft_dagster.core.families.build import train_tokenizer
from apsft_dagster.core.families.templates import FAMILIES
from apsft_dagster.core.protocol import format_answer, format_record
from apsft_dagster.core.text_protocol import DEFAULT, derive, require_prompts

TEXTS = ["Caravan A leaves at 9 with 12 crates; each stop adds 3.", "step 1: 12 + 3 = 15", "ANSWER: 15"] * 40
PROMPT, THOUGHT, ANSWER = "A caravan carries 12 crates and picks up 3.\nHow many?", "12 + 3 = 15\n", "15"
# Qwen3's template rewrites an assistant turn that holds a thought (it re-renders the reasoning block), so its
# record is compared with the generation prompt plus the continuation, which is what the model is given.
VERBATIM_REPLY = ("llama", "gemma3_text", "mistral")


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request):
    fam = FAMILIES[request.param]
    tokenizer = train_tokenizer(fam, TEXTS, 300)
    return request.param, tokenizer, derive(tokenizer, Markers(**fam.markers), request.param)


def test_x_is_the_templates_user_turn_and_the_record_is_the_templates_conversation(family):
    name, tokenizer, protocol = family
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                             add_generation_prompt=True)
    x = protocol.format_prompt(PROMPT)
    assert x.startswith(rendered) and x.endswith(protocol.think_open + "\n")
    assert x.removeprefix(rendered) in ("", protocol.think_open + "\n")
    record = protocol.format_record(PROMPT, THOUGHT, ANSWER)
    assert record == x + THOUGHT + protocol.think_close + protocol.answer_marker + " 15" + protocol.end
    if name in VERBATIM_REPLY:
        reply = record.removeprefix(rendered).removesuffix(protocol.end)
        whole = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT},
                                               {"role": "assistant", "content": reply}], tokenize=False)
        assert whole.startswith(record)  # the template's own rendering, up to what follows its end of turn
    assert protocol.parse_answer(record.removeprefix(x + THOUGHT + protocol.think_close)) == "15"


def test_spans_split_the_record_where_each_piece_begins(family):
    _, tokenizer, protocol = family
    x, answer = protocol.format_prompt(PROMPT), format_answer(ANSWER)
    spans = protocol.locate_spans(tokenizer, x, THOUGHT, answer, protocol.end)
    text = x + THOUGHT + protocol.boundary + answer + protocol.end
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    starts = [len(x), len(x) + len(THOUGHT), len(x) + len(THOUGHT) + len(protocol.boundary),
              len(text) - len(protocol.end)]
    by_hand = [sum(1 for s, _ in enc["offset_mapping"] if s >= cut) for cut in starts]  # tokens from each cut on
    assert spans.input_ids == enc["input_ids"]
    assert [len(spans.thought) + len(spans.boundary) + len(spans.answer) + len(spans.end),
            len(spans.boundary) + len(spans.answer) + len(spans.end), len(spans.answer) + len(spans.end),
            len(spans.end)] == by_hand
    assert tokenizer.decode(spans.input_ids[spans.end.start:]) == protocol.end  # one token: the stop


def test_the_shipped_embedded_models_give_the_protocol_of_core_protocol():
    from transformers import AutoTokenizer

    for folder in sorted(p for p in SHIPPED.iterdir() if p.is_dir()):
        protocol = derive(AutoTokenizer.from_pretrained(folder), Markers(), str(folder))
        assert (protocol.head, protocol.tail, protocol.end) == (DEFAULT.head, DEFAULT.tail, DEFAULT.end)
        assert protocol.format_record(PROMPT, THOUGHT, ANSWER) == format_record(PROMPT, THOUGHT, ANSWER)


def test_a_prompt_the_template_rewrites_is_refused_by_task(family):
    name, tokenizer, protocol = family
    require_prompts(protocol, tokenizer, {"caravan-L1-000": PROMPT})
    if name in ("llama", "gemma3_text"):  # their templates trim the user's words
        with pytest.raises(ModelDirectoryError, match="task caravan-L1-001: the chat template .* renders its prompt"):
            require_prompts(protocol, tokenizer, {"caravan-L1-001": PROMPT + "\n"})


def test_a_tokenizer_other_than_the_bound_protocols_is_refused():
    tokenizer = train_tokenizer(FAMILIES["llama"], TEXTS, 300)
    with pytest.raises(ModelDirectoryError, match="bind the run's protocol first"):
        DEFAULT.prompt_ids(tokenizer, PROMPT)


@pytest.mark.parametrize("name", ["qwen3_moe", "gemma3_text", "mistral"])
def test_other_layouts_load_train_and_merge_through_the_projects_own_code(name, tmp_path):
    """A random tiny snapshot of the family: the LoRA targets derived from its module tree (a mixture of
    experts: its attention; the fused expert tensors stay frozen), one weighted step on a protocol record, the
    adapter saved, merged into the snapshot's files, and the merged model's logits equal peft's in memory."""
    import torch
    from transformers import AutoModelForCausalLM

    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.families.build import model_for
    from apsft_dagster.core.training.loop import attach_adapter, load_base
    from apsft_dagster.core.training.lora import save_adapter
    from apsft_dagster.core.training.loss import weighted_nll
    from apsft_dagster.core.training.merge import merge_snapshot

    config = load_config("smoke")
    tiny = config.embedded.model_copy(update={"hidden_size": 32, "intermediate_size": 64, "num_layers": 2,
                                              "head_dim": 16, "max_positions": 256})
    tokenizer = train_tokenizer(FAMILIES[name], TEXTS, 300)
    protocol = derive(tokenizer, Markers(**FAMILIES[name].markers), name)
    base = tmp_path / "base"
    model_for(FAMILIES[name], tiny, tokenizer, seed=7).save_pretrained(base)
    tokenizer.save_pretrained(base)
    model = load_base(str(base), config.compute)
    linears = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n]
    training = config.training.model_copy(update={"target_modules": {}})
    peft_model, targets, pairs, _ = attach_adapter(model, training, seed=7)
    assert targets == sorted({n.rsplit(".", 1)[1] for n in linears}) and pairs == len(linears) > 0
    if name == "qwen3_moe":  # the experts are fused 3-D tensors, not linear modules: attention only
        assert targets == ["k_proj", "o_proj", "q_proj", "v_proj"]
    spans = protocol.locate_spans(tokenizer, protocol.format_prompt(PROMPT), THOUGHT, format_answer(ANSWER),
                                  protocol.end)
    ids = torch.tensor(spans.input_ids)
    weights = torch.tensor([0.0] * len(spans.prompt) + [0.5] * len(spans.thought)
                           + [1.0] * (len(ids) - len(spans.prompt) - len(spans.thought)))
    optimizer = torch.optim.SGD([p for p in peft_model.parameters() if p.requires_grad], lr=0.5)
    total, weight = weighted_nll(peft_model(input_ids=ids[None]).logits[0], ids, weights)
    (total / weight).backward()
    optimizer.step()
    save_adapter(peft_model, tmp_path, "base", None)
    (tmp_path / "adapter").mkdir()
    for file in ("adapter_model.safetensors", "adapter_config.json"):
        (tmp_path / file).rename(tmp_path / "adapter" / file)
    proof = merge_snapshot(base, tmp_path / "adapter", tmp_path / "merged")
    assert proof["lora_pairs"] == pairs
    with torch.no_grad():
        expected = peft_model.merge_and_unload()(input_ids=ids[None]).logits
        merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")(input_ids=ids[None]).logits
    assert torch.allclose(merged, expected, atol=1e-5)


def test_doctor_reads_the_protocol_from_the_snapshot_with_the_profiles_markers(tmp_path):
    from apsft_dagster.core.config import load_config
    from apsft_dagster.core.doctor.check import FAILS, OK
    from apsft_dagster.core.doctor.profile_checks import protocol_check

    train_tokenizer(FAMILIES["gemma3_text"], TEXTS, 300).save_pretrained(tmp_path)
    config = load_config("smoke")
    local = config.model.model_copy(update={"source": "local", "path": str(tmp_path), "architecture": None})
    plain = config.model_copy(update={"model": local, "embedded": None})  # Qwen's markers: <think> is no token
    failed = protocol_check(plain, tmp_path)
    assert failed.status == FAILS and "protocol.think_open '<think>' is not one token" in failed.why
    declared = plain.model_copy(update={"protocol": Markers(**FAMILIES["gemma3_text"].markers)})
    passed = protocol_check(declared, tmp_path)
    assert passed.status == OK and "'</reasoning>\\n\\nFinal answer:'" in passed.why and "'<end_of_turn>'" in passed.why


def test_the_arms_export_as_messages_that_render_back_to_the_record_under_every_familys_template(family):
    """Qwen3's template writes a thought block of its own around a reply without one: the messages still render
    back to the trained record (the export refused every row of a Qwen3-style template before)."""
    from apsft_dagster.core.arm_export.records import chat_messages

    name, tokenizer, protocol = family
    messages = chat_messages(tokenizer, protocol, PROMPT, THOUGHT, ANSWER, f"{name} row 0")
    record = protocol.format_record(PROMPT, THOUGHT, ANSWER)
    assert messages[0] == {"role": "user", "content": PROMPT}
    assert tokenizer.apply_chat_template(messages, tokenize=False).startswith(record)
    assert messages[1]["content"].startswith(protocol.think_open + "\n" + THOUGHT)
    assert messages[1]["content"].endswith(protocol.think_close + protocol.answer_marker + " 15")
