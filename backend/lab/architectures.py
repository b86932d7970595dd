"""Config facts of well-known target architectures, so the draft-length rules and the KV-cache cost can
be read for a model nobody has loaded here: layers, query and KV heads, hidden size, head size, and the
sliding-window layers a KV-cache estimate has to treat apart.

Facts only (no weights, nothing downloaded). Each row names the published config.json it was read from
and, where that repository is gated, the public copy it was checked against. `facts()` uses the keys
of `backend.core.models.config_facts`, so a row can stand in for a loaded target's facts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    name: str
    num_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    hidden_size: int
    head_dim: int
    source: str
    sliding_layers: int = 0  # layers that attend to the last `sliding_window` tokens only
    sliding_window: int | None = None

    def facts(self) -> dict:
        return {
            "num_layers": self.num_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "hidden_size": self.hidden_size,
            "head_dim": self.head_dim,
            "sliding_layers": self.sliding_layers,
            "sliding_window": self.sliding_window,
        }


ARCHITECTURES: dict[str, Architecture] = {
    a.name: a
    for a in (
        Architecture(
            "Llama-3.1-8B",
            num_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            hidden_size=4096,
            head_dim=128,
            source="https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json (gated; checked against "
            "the copy in https://huggingface.co/NbAiLab/nb-llama-3.1-8B/blob/main/config.json)",
        ),
        Architecture(
            "Llama-3.1-70B",
            num_layers=80,
            num_attention_heads=64,
            num_key_value_heads=8,
            hidden_size=8192,
            head_dim=128,  # hidden_size / num_attention_heads; the config has no head_dim
            source="https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json (gated; checked against "
            "https://huggingface.co/mlabonne/Llama-3.1-70B-Instruct-lorablated/blob/main/config.json)",
        ),
        Architecture(
            "Qwen3-32B",
            num_layers=64,
            num_attention_heads=64,
            num_key_value_heads=8,
            hidden_size=5120,
            head_dim=128,  # set in the config: not hidden_size / heads (80)
            source="https://huggingface.co/Qwen/Qwen3-32B/blob/main/config.json (checked against "
            "https://huggingface.co/ronnywebdevs1/d-m-1/blob/main/config.json and MindSpeed-RL's qwen3_32b.yaml)",
        ),
        Architecture(
            "Qwen3-235B-A22B",
            num_layers=94,
            num_attention_heads=64,
            num_key_value_heads=4,
            hidden_size=4096,
            head_dim=128,
            source="https://huggingface.co/Qwen/Qwen3-235B-A22B/blob/main/config.json (checked against maxtext's "
            "configs/models/qwen3-235b-a22b.yml and slime's scripts/models/qwen3-235B-A22B.sh)",
        ),
        Architecture(
            "Gemma-3-27B",
            num_layers=62,
            num_attention_heads=32,
            num_key_value_heads=16,
            hidden_size=5376,
            head_dim=128,
            sliding_layers=52,  # 5 of every 6 layers local: layer i is global when (i + 1) % 6 == 0
            sliding_window=1024,
            source="https://huggingface.co/google/gemma-3-27b-it/blob/main/config.json, text_config (gated; "
            "checked against the Gemma 3 technical report, arXiv:2503.19786, and transformers' Gemma3TextConfig "
            "layer pattern)",
        ),
        Architecture(
            "gpt-oss-120b",
            num_layers=36,
            num_attention_heads=64,
            num_key_value_heads=8,
            hidden_size=2880,
            head_dim=64,
            sliding_layers=18,  # layer_types alternate sliding_attention, full_attention
            sliding_window=128,
            source="https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json (checked against "
            "https://huggingface.co/witflag/AlphaMind/blob/main/original/config.json, a duplicate of it)",
        ),
        Architecture(
            "Mistral-7B-v0.1",
            num_layers=32,
            num_attention_heads=32,
            num_key_value_heads=8,
            hidden_size=4096,
            head_dim=128,
            sliding_layers=32,  # every layer attends to the last 4096 tokens
            sliding_window=4096,
            source="https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json (checked against "
            "https://huggingface.co/mlx-community/mistral-7B-v0.1/blob/main/config.json)",
        ),
    )
}
