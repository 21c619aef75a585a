"""The architecture comes from the snapshot: `full` pointed at a Qwen3.5-layout or a Qwen3 directory
loads, describes it from its own config.json, and resolves the LoRA targets and pair count the
model itself has (counted here from the layer types); a chat template off the protocol is refused."""

import json

import pytest

from apsft_dagster.core.config import load_config
from apsft_dagster.core.errors import ConfigError, ModelDirectoryError
from apsft_dagster.core.base_model import inspect_model_dir
from apsft_dagster.core.snapshot import check_chat_template, require_lora_targets
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


@pytest.mark.slow
def test_a_chat_template_off_the_protocol_is_refused_naming_the_snapshot(tmp_path):
    snapshot = tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2)
    (snapshot / "chat_template.jinja").write_text(
        "{% for m in messages %}<|im_start|>{{ m['role'] }}: {{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pytest.raises(ModelDirectoryError, match=rf"{snapshot}: the chat template renders a user turn as"):
        check_chat_template(snapshot)


def test_unknown_layer_types_are_refused(tmp_path):
    snapshot = tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2)
    config = json.loads((snapshot / "config.json").read_text())
    config["text_config"]["layer_types"] = ["sliding_attention", "full_attention"]
    (snapshot / "config.json").write_text(json.dumps(config))
    with pytest.raises(ModelDirectoryError, match=r"layer_types \['sliding_attention'\] are not known"):
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
def test_a_snapshot_whose_architecture_has_no_lora_targets_is_refused_up_front(tmp_path, monkeypatch):
    snapshot = tiny_snapshot(tmp_path / "model", "qwen3_5", layers=2)
    monkeypatch.setenv("APSFT_MODEL_DIR", str(snapshot))
    found = inspect_model_dir(snapshot)["snapshot"]
    targets = load_config("full").training.target_modules
    assert require_lora_targets(found, targets, "here") == targets["qwen3_5"]
    with pytest.raises(ModelDirectoryError, match=r"model_type 'qwen3_5'.*entries for \['qwen3'\] only; add qwen3_5:"):
        require_lora_targets(found, {"qwen3": targets["qwen3"]}, "here")
