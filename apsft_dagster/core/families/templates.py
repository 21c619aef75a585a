"""Each family's chat-template style, its special tokens and the protocol markers its profile declares.

The templates follow their families' published ones where the protocol reads them: Llama 3's headers and
`| trim`, Gemma 3's `model` role and `<end_of_turn>`, Mistral's `[INST]` with no generation prompt and the
end of sequence closing a reply, Qwen3's ChatML whose last assistant turn gets a `<think>` block. Thinking
markers: `<think>` where a family's reasoning models use it (DeepSeek-R1's Llama distills, Qwen3),
Magistral's `[THINK]`/`[/THINK]` for Mistral, and declared text markers for Gemma 3, which has none.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LLAMA3 = """{{- bos_token }}
{%- for message in messages %}
    {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim
        + '<|eot_id|>' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

GEMMA3 = """{{ bos_token }}
{%- for message in messages -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\\n' }}
{%- endif -%}
"""

MISTRAL = """{{- bos_token }}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}
        {{- '[INST]' + message['content'] + '[/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {{- message['content'] + eos_token }}
    {%- endif %}
{%- endfor %}
"""

QWEN3 = """{%- for message in messages %}
    {%- if message.role == 'assistant' %}
        {%- set content = message.content %}
        {%- set reasoning = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.last %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning + '\\n</think>\\n\\n' + content + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""


@dataclass(frozen=True)
class Family:
    name: str  # config.json's model_type
    template: str
    bos: str | None
    eos: str  # the end of a turn: what the template writes after a reply, and the tokenizer's eos
    pad: str
    specials: tuple[str, ...]  # every special token, markers included
    markers: dict = field(default_factory=dict)  # the profile's `protocol` section (empty: the defaults)


_THINK = ("<think>", "</think>")
FAMILIES = {
    "llama": Family("llama", LLAMA3, "<|begin_of_text|>", "<|eot_id|>", "<|finetune_right_pad_id|>",
                    ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                     "<|finetune_right_pad_id|>", *_THINK)),
    "qwen3": Family("qwen3", QWEN3, None, "<|im_end|>", "<|endoftext|>",
                    ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *_THINK)),
    "qwen3_moe": Family("qwen3_moe", QWEN3, None, "<|im_end|>", "<|endoftext|>",
                        ("<|endoftext|>", "<|im_start|>", "<|im_end|>", *_THINK)),
    "gemma3_text": Family("gemma3_text", GEMMA3, "<bos>", "<end_of_turn>", "<pad>",
                          ("<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<reasoning>",
                           "</reasoning>"),
                          {"think_open": "<reasoning>", "think_close": "</reasoning>",
                           "answer_marker": "\n\nFinal answer:"}),
    "mistral": Family("mistral", MISTRAL, "<s>", "</s>", "<pad>",
                      ("<pad>", "<s>", "</s>", "[INST]", "[/INST]", "[THINK]", "[/THINK]"),
                      {"think_open": "[THINK]", "think_close": "[/THINK]"}),
}
