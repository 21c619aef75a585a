"""The architecture comes from the snapshot: `full` pointed at a Qwen3.5-layout or a Qwen3 directory
loads, describes it from its own config.json, and resolves the LoRA targets and pair count the
model itself has (counted here from the layer types); a chat template that cannot hold the protocol is refused."""

import json

import pytest

from apsft_dagster.core.base_model import inspect_model_dir
from apsft_dagster.core.config import Markers, load_config
from apsft_dagster.core.errors import ConfigError, ModelDirectoryError, TrainingError
from apsft_dagster.core.snapshot import check_chat_template
from apsft_dagster.core.training.lora import target_modules
from conftest import variant_config
from tiny import tiny_snapshot

ATTENTION, MLP, DELTA = 4, 3, 5  # q/k/v/o; gate/up/down; in_proj_qkv/z/b/a + out_proj


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["qwen3_5", "qwen3"])
def test_full_profile_runs_on_the_architecture_its_snapshot_says(layout, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    snapshot = tiny_snapshot(tmp_path / "model", layout, layers=4)
    monkeypatch.setenv("APSFT_MODEL_DIR", str(snapshot))
    config = load_config("full")
    found = inspect_model_dir(snapshot)["snapshot"]
    model = AutoModelForCausalLM.from_pretrained(snapshot)
    targets, pairs = target_modules(model, config.training)
    if layout == "qwen3_5":
        assert found["architectures"] == ["Qwen3_5ForConditionalGeneration"] and found["vision_tower"]
        assert found["layer_types"] == {"full_attention": 2, "linear_attention": 2}  # interval 2 in the tiny build
        assert found["chat_template"] == "opens the thinking turn" and not found["tie_word_embeddings"]
        assert targets == sorted(config.training.target_modules["qwen3_5"])
        assert pairs == 2 * (ATTENTION + MLP) + 2 * (DELTA + MLP)
    else:
        assert found["architectures"] == ["Qwen3ForCausalLM"] and not found["vision_tower"]
        assert found["layer_types"] == {"full_attention": 4}
        assert found["chat_template"].startswith("leaves the thinking turn to the model")
        assert targets == sorted(config.training.target_modules["qwen3"]) and pairs == 4 * (ATTENTION + MLP)


OFF_PROTOCOL = {  # a template that cannot hold the protocol -> what the refusal names
    "{% for m in messages %}<|im_start|>{{ m['role'] }}<|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}": "does not write the user's words once",
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n\n</think>\n\n{% endif %}": "already closes",
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}": "writes nothing after the assistant",
}


def tokenizer_folder(folder):
    """A snapshot's tokenizer files alone (the template check reads no weights): Qwen's specials, Qwen3's template."""
    from apsft_dagster.core.families.build import train_tokenizer
    from apsft_dagster.core.families.templates import FAMILIES

    train_tokenizer(FAMILIES["qwen3"], ["What is 2 + 3?", "2 + 3 = 5", "ANSWER: 5"] * 20, 280).save_pretrained(folder)
    return folder


@pytest.mark.parametrize("template", list(OFF_PROTOCOL), ids=["drops-words", "thinking-off", "no-end-of-turn"])
def test_a_chat_template_off_the_protocol_is_refused_naming_the_snapshot(template, tmp_path):
    snapshot = tokenizer_folder(tmp_path / "model")
    check_chat_template(snapshot)  # Qwen3's own template holds it
    (snapshot / "chat_template.jinja").write_text(template)
    with pytest.raises(ModelDirectoryError, match=rf"{snapshot}: the chat template.*{OFF_PROTOCOL[template]}"):
        check_chat_template(snapshot)


def test_a_marker_the_tokenizer_does_not_hold_is_refused_by_name(tmp_path):
    snapshot = tokenizer_folder(tmp_path / "model")
    with pytest.raises(ModelDirectoryError, match=r"protocol.think_close '<end-thought>' is not one token"):
        check_chat_template(snapshot, Markers(think_close="<end-thought>"))


def test_unknown_layer_types_are_refused(tmp_path):
    snapshot = tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2)
    config = json.loads((snapshot / "config.json").read_text())
    config["text_config"]["layer_types"] = ["chunked_attention", "full_attention"]
    (snapshot / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirectoryError, match=r"layer_types \['chunked_attention'\] are not known"):
        inspect_model_dir(snapshot)


def test_a_local_profile_may_not_name_an_architecture(tmp_path, monkeypatch):
    monkeypatch.setenv("APSFT_MODEL_DIR", str(tiny_snapshot(tmp_path / "model", "qwen3", layers=1)))
    bad = variant_config(tmp_path, lambda raw: raw["model"].update(architecture="qwen3_5"), base="full")
    with pytest.raises(ConfigError, match="model.architecture: only for model.source embedded"):
        load_config(path=bad)
    embedded = variant_config(tmp_path, lambda raw: raw["model"].pop("architecture"))
    with pytest.raises(ConfigError, match="model.architecture: required when model.source is 'embedded'"):
        load_config(path=embedded)


@pytest.mark.slow
def test_lora_targets_are_derived_from_the_module_tree_unless_the_profile_names_them(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2))
    training = load_config("smoke").training
    linears = sorted(n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".layers." in n)
    derived = training.model_copy(update={"target_modules": {}})
    assert target_modules(model, derived) == (sorted({n.rsplit(".", 1)[1] for n in linears}), len(linears))
    only_attention = training.model_copy(update={"target_modules": {"qwen3_5": ["q_proj", "k_proj"]}})
    assert target_modules(model, only_attention) == (["k_proj", "q_proj"], 2)  # one full-attention layer of two
    bad = training.model_copy(update={"target_modules": {"qwen3_5": ["q_proj", "w_gate"]}})
    with pytest.raises(TrainingError, match=r"training.target_modules.qwen3_5: \['w_gate'\] are not linear"):
        target_modules(model, bad)
