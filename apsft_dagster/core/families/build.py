"""Build a tiny snapshot of one family (templates.py): its tokenizer, its architecture at the embedded model's
sizes, pretrained on the embedded model's corpus rendered through the family's own template and markers.

The build uses the embedded model's pieces as a library (its corpus, its fixed-step pretraining loop), so the
only differences from the shipped model are the family's: tokenizer specials, chat template, markers, layout.
Deterministic on CPU: the same config gives the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from pathlib import Path

import torch

from apsft_dagster.core.config import Config, Embedded, Markers
from apsft_dagster.core.families.templates import FAMILIES, Family
from apsft_dagster.core.protocol import format_answer, format_thought
from apsft_dagster.core.text_protocol import TextProtocol, derive

IGNORE = -100


def train_tokenizer(family: Family, texts: list[str], vocab_size: int):
    """Byte-level BPE with single digits (as the embedded tokenizer), the family's special tokens and template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, show_progress=False,
                                                       special_tokens=list(family.specials),
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    named = {"eos_token": family.eos, "pad_token": family.pad, **({"bos_token": family.bos} if family.bos else {})}
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, **named,
                                        extra_special_tokens=[t for t in family.specials if t not in named.values()])
    tokenizer.chat_template = family.template
    return tokenizer


def model_for(family: Family, cfg: Embedded, tokenizer, seed: int):
    """The family's causal LM at the embedded sizes (Qwen3-MoE: four experts, two per token)."""
    import transformers as tf

    text = dict(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
                num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim, max_position_embeddings=cfg.max_positions,
                bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                pad_token_id=tokenizer.pad_token_id)
    every = cfg.num_layers  # one full-attention layer at the top, as the families interleave them
    config = {
        "llama": lambda: tf.LlamaConfig(**text, tie_word_embeddings=False),
        "mistral": lambda: tf.MistralConfig(**text, sliding_window=None, tie_word_embeddings=False),
        "qwen3": lambda: tf.Qwen3Config(**text, tie_word_embeddings=True),
        "qwen3_moe": lambda: tf.Qwen3MoeConfig(**text, moe_intermediate_size=cfg.intermediate_size // 2, num_experts=4,
                                               num_experts_per_tok=2, tie_word_embeddings=True),
        "gemma3_text": lambda: tf.Gemma3TextConfig(
            **text, query_pre_attn_scalar=cfg.head_dim, sliding_window=cfg.max_positions // 2,
            layer_types=["full_attention" if (i + 1) % every == 0 else "sliding_attention"
                         for i in range(cfg.num_layers)]),
    }[family.name]()
    torch.manual_seed(seed)
    return tf.AutoModelForCausalLM.from_config(config)


def encode(protocol: TextProtocol, tokenizer, tasks) -> list[tuple[list[int], list[int]]]:
    """(input_ids, labels) per worked solution; the prompt masked, as the embedded pretraining does."""
    out = []
    for t in tasks:
        spans = protocol.locate_spans(tokenizer, protocol.format_prompt(t.prompt), format_thought(t.solution),
                                      format_answer(t.answer), protocol.end)
        ids = spans.input_ids
        out.append((ids, [IGNORE] * spans.thought.start + ids[spans.thought.start:]))
    return out


def build_family(name: str, config: Config, catalog_prompts: Collection[str], out_dir: Path,
                 log: Callable[[str], None] = print) -> dict:
    """Train and save `name`'s snapshot into `out_dir`; its report (also written as apsft_family.json)."""
    from apsft_dagster.core.embedded.build import pretraining_tasks
    from apsft_dagster.core.embedded.model import pretrain

    family, cfg = FAMILIES[name], config.embedded
    torch.set_num_threads(cfg.threads)
    torch.use_deterministic_algorithms(True)
    corpus = pretraining_tasks(config, set(catalog_prompts))
    texts = [piece for t in corpus for piece in (t.prompt, t.solution, t.answer)]
    tokenizer = train_tokenizer(family, texts, cfg.vocab_size)
    protocol = derive(tokenizer, Markers(**family.markers), f"the tiny {name} snapshot")
    model = model_for(family, cfg, tokenizer, config.seeds.experiment)
    examples = encode(protocol, tokenizer, corpus)
    log(f"{name}: pretraining {sum(p.numel() for p in model.parameters()):,} parameters ({type(model).__name__}) "
        f"on {len(examples)} worked solutions for {cfg.train_steps} steps")
    losses = pretrain(model, examples, cfg, config.seeds.experiment, tokenizer.pad_token_id,
                      lambda step, loss: step % 60 == 59 and log(f"{name}: step {step + 1} loss {loss:.3f}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    report = {"family": name, "architecture": type(model).__name__, "parameters": sum(p.numel() for p in
                                                                                       model.parameters()),
              "markers": family.markers, "final_loss": sum(losses[-36:]) / len(losses[-36:])}
    (out_dir / "apsft_family.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return report
