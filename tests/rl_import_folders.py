"""Run folders laid out as trainers write them, made here for the RL report's importer tests:
TRL (Hugging Face TrainerState and checkpoint-N/ folders), TensorBoard (its own writer), a W&B
history CSV and verl's file-logger JSON lines with rollout dumps. Values are exact in float32."""

from __future__ import annotations

import json
from pathlib import Path

BASE = "Qwen/Qwen2.5-0.5B-Instruct"
WEIGHTS = b"\x02\x00\x00\x00\x00\x00\x00\x00{}"  # a few-byte stand-in for adapter_model.safetensors
TRL_HISTORY = [  # TrainerState.log_history as GRPOTrainer logs it: train rows, eval rows (eval_*), the summary
    {"loss": 0.01, "grad_norm": float("nan"), "learning_rate": 1e-6, "reward": 0.25, "reward_std": 0.125,
     "rewards/accuracy_reward/mean": 0.25, "completions/mean_length": 120.0, "epoch": 0.25, "step": 5},
    {"loss": 0.02, "reward": 0.375, "epoch": 0.5, "step": 10},
    {"eval_loss": 0.5, "eval_reward": 0.25, "eval_runtime": 3.2, "eval_samples_per_second": 10.0,
     "eval_steps_per_second": 1.0, "epoch": 0.5, "step": 10},
    {"loss": 0.03, "reward": 0.5, "epoch": 0.75, "step": 15},
    {"loss": 0.03, "reward": 0.625, "epoch": 1.0, "step": 20},
    {"eval_loss": 0.375, "eval_reward": 0.5, "eval_runtime": 3.1, "eval_samples_per_second": 10.3,
     "eval_steps_per_second": 1.0, "epoch": 1.0, "step": 20},
    {"train_runtime": 100.0, "train_samples_per_second": 1.0, "train_steps_per_second": 0.2, "total_flos": 0.0,
     "train_loss": 0.02, "epoch": 1.0, "step": 20},
]


def _json(path: Path, doc) -> None:
    path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")  # as TrainerState.save_to_json writes


def trainer_state(step: int, rows: int) -> dict:
    return {"best_metric": None, "best_model_checkpoint": None, "epoch": step / 20, "eval_steps": 10,
            "global_step": step, "is_hyper_param_search": False, "is_local_process_zero": True,
            "is_world_process_zero": True, "log_history": TRL_HISTORY[:rows], "logging_steps": 5, "max_steps": 20,
            "num_input_tokens_seen": 0, "num_train_epochs": 1, "save_steps": 10, "stateful_callbacks": {},
            "total_flos": 0.0, "train_batch_size": 4, "trial_name": None, "trial_params": None}


def trl_folder(root: Path, weights_at_20: bool = True) -> Path:
    """output_dir after GRPOTrainer.train() and save_state(), saving a LoRA adapter every 10 steps."""
    root.mkdir(parents=True)
    _json(root / "trainer_state.json", trainer_state(20, len(TRL_HISTORY)))
    for step, rows in ((10, 3), (20, 6)):
        checkpoint = root / f"checkpoint-{step}"
        checkpoint.mkdir()
        _json(checkpoint / "trainer_state.json", trainer_state(step, rows))
        _json(checkpoint / "adapter_config.json", {"base_model_name_or_path": BASE, "peft_type": "LORA", "r": 16,
                                                   "lora_alpha": 32, "task_type": "CAUSAL_LM"})
        if step == 10 or weights_at_20:
            (checkpoint / "adapter_model.safetensors").write_bytes(WEIGHTS)
    return root


TB_SCALARS = {10: {"train/reward": 0.25, "eval/accuracy": 0.5, "eval/loss": 0.5, "eval/runtime": 3.0},
              20: {"train/reward": 0.5, "eval/accuracy": 0.75, "eval/loss": 0.625, "eval/runtime": 3.0},
              30: {"train/reward": 0.75, "eval/accuracy": 0.625, "eval/loss": 0.25, "eval/runtime": 3.0}}


def tensorboard_folder(root: Path) -> Path:
    """Scalars written by TensorBoard's own writer, where Hugging Face's callback puts them (runs/<name>/)."""
    from tensorboard.summary import Writer

    writer = Writer(str(root / "runs" / "grpo"))
    for step, scalars in TB_SCALARS.items():
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, step, wall_time=1_700_000_000.0 + step)
    writer.close()
    return root


WANDB_CSV = ("_step,_runtime,train/reward,eval/accuracy,eval/loss\n"
             "0,1.5,0.125,0.25,1.0\n"
             "5,7.5,0.25,,\n"  # W&B rows are sparse: no eval at step 5
             "10,15.0,0.5,0.5,0.75\n")


def wandb_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "wandb_export.csv").write_text(WANDB_CSV)
    return root


VERL_STEPS = {1: (0.25, 0.5), 2: (0.5, 0.75)}  # step: (critic/score/mean, val-core/gsm8k/reward/mean@1)
VERL_ROLLOUTS = {1: [("What is 2 + 2?", "It is 4.", 1.0), ("What is 3 + 3?", "It is 5.", 0.0)],
                 2: [("What is 3 + 3?", "It is 6.", 1.0), ("What is 5 + 1?", "It is 6.", 1.0)]}


def verl_folder(root: Path) -> Path:
    """verl with trainer.logger=['console','file'] (VERL_FILE_LOGGER_PATH=<run>/metrics.jsonl) and
    trainer.rollout_data_dir=<run>/rollouts."""
    (root / "rollouts").mkdir(parents=True)
    lines = [{"step": s, "data": {"critic/score/mean": score, "critic/rewards/mean": score - 0.125,
                                  "val-core/gsm8k/reward/mean@1": val, "response_length/mean": 100.0 + s,
                                  "timing_s/step": 3.5}} for s, (score, val) in VERL_STEPS.items()]
    (root / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    for step, samples in VERL_ROLLOUTS.items():
        rows = [{"input": q, "output": a, "gts": "", "score": r, "step": step} for q, a, r in samples]
        (root / "rollouts" / f"{step}.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return root
