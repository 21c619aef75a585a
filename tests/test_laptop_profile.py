"""The laptop profile is `full` with one declared block of scaled values: it validates, every value
it sets differs from full and says (in its comment) the registered value, and none of the
protocol's counts, seeds, splits, arms, selection rules or training settings is among them."""

import re

import yaml

from apsft_dagster.core.config import load_config, read_profile
from apsft_dagster.core.paths import CONFIG_DIR

LAPTOP = CONFIG_DIR / "laptop.yaml"
# what the registered protocol fixes: never scaled, whatever the model
PROTOCOL = ("seeds", "tasks", "selection", "stage_b", "scoring", "rollouts", "merge", "probe.prompts",
            "harvest.samples_per_task", "harvest.sampling", "harvest.topup_batches", "harvest.topup_size",
            "harvest.min_eligible", "harvest.loop", "harvest.inherited_index", "training.epochs",
            "training.grad_accum", "training.batch_size", "training.loss_weights", "training.lora.dropout",
            "training.max_grad_norm", "training.checkpoint_every", "training.warmup_records",
            "training.target_modules", "evaluation.bootstrap_resamples", "evaluation.confidence")


def _leaves(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _get(node, dotted):
    for key in dotted.split("."):
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def test_the_laptop_profile_validates_on_the_embedded_model_and_the_cpu():
    config = load_config("laptop")
    assert (config.profile, config.model.source, config.compute.device) == ("laptop", "embedded", "cpu")
    assert config.digest != load_config("smoke").digest


def test_only_the_declared_block_differs_from_full_and_never_a_registered_number():
    raw = yaml.safe_load(LAPTOP.read_text())
    assert raw.pop("extends") == "full" and raw.pop("profile") == "laptop"
    full = read_profile(CONFIG_DIR / "full.yaml")
    laptop = read_profile(LAPTOP)
    declared = dict(_leaves(raw))
    changed = {k for k, _ in _leaves(laptop) if _get(full, k) != _get(laptop, k)} - {"profile"}
    assert changed == {k for k in declared if _get(full, k) != declared[k]}  # the file's block is the whole diff
    assert all(_get(full, k) != v for k, v in declared.items()), "a line that changes nothing is no declaration"
    assert not [k for k in declared if k.startswith(PROTOCOL)], "a registered number was scaled"
    assert (laptop["tasks"], laptop["seeds"], laptop["selection"]) == (full["tasks"], full["seeds"], full["selection"])


def test_every_scaled_line_says_the_registered_value():
    """Each key set in the block carries `registered:` on its line, or sits in a section whose
    first line says `registered: none` (a section full does not have)."""
    lines = LAPTOP.read_text().split("# ---- scaled", 1)[1].splitlines()[1:]
    open_section = None
    for line in lines:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key = re.match(r"^(\s*)([a-z_]+):", line)
        if key and not key.group(1):
            open_section = "none" if "registered: none" in line else None
        value_line = key and not line.rstrip().endswith(":")
        if value_line and len(key.group(1)) > 0 and open_section != "none":
            assert "# registered:" in line, f"laptop.yaml: {line.strip()!r} does not say the registered value"
