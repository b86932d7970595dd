"""The table of well-known architectures: every row is a valid grouped-query shape with a cited source,
its sliding-window layers are consistent, and it gives the rules the answers worked out by hand."""

from __future__ import annotations

from backend.lab.architectures import ARCHITECTURES
from backend.lab.draft_rules import draft_rules, heads_problem


def test_every_row_is_a_valid_shape_with_a_source():
    assert len(ARCHITECTURES) >= 7
    for arch in ARCHITECTURES.values():
        assert heads_problem(arch.num_attention_heads, arch.num_key_value_heads) is None, arch.name
        assert arch.source.startswith("https://huggingface.co/") and "config.json" in arch.source, arch.name
        assert 0 <= arch.sliding_layers <= arch.num_layers
        assert (arch.sliding_window is not None) == (arch.sliding_layers > 0), arch.name
        assert arch.facts()["head_dim"] == arch.head_dim


def test_gemma3_keeps_one_global_layer_in_six():
    gemma = ARCHITECTURES["Gemma-3-27B"]
    assert gemma.sliding_layers == sum(1 for i in range(gemma.num_layers) if (i + 1) % 6)


def test_the_rules_for_the_table():
    d = {name: draft_rules(a.num_attention_heads, a.num_key_value_heads) for name, a in ARCHITECTURES.items()}
    for name in ("Llama-3.1-70B", "Qwen3-32B", "gpt-oss-120b"):  # 64 query heads, 8 KV heads: G = 8
        assert d[name]["d_suggested"] == 15 and d[name]["d_ladder"] == [15, 31, 47, 63], name
    assert d["Qwen3-235B-A22B"]["G"] == 16 and d["Qwen3-235B-A22B"]["d_ladder"][:2] == [7, 15]
    assert d["Gemma-3-27B"]["d_suggested"] == 63 and d["Gemma-3-27B"]["d_ladder"] == [63]
    assert d["Llama-3.1-8B"]["d_ladder"] == d["Mistral-7B-v0.1"]["d_ladder"] == [31, 63]
