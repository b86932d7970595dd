"""The EAGLE-3 export against the engines' layout: every tensor name and shape their loaders expect, the
config keys they read, d2t/t2d as vLLM and SGLang apply them, and two numerical round trips: our head
rebuilt from the export, and the engines' forward (written here from vllm/model_executor/models/
llama_eagle3.py) on the exported tensors, both giving the original head's logits."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoConfig, LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from backend.core.errors import SpecScopeError
from backend.drafters import eagle3
from backend.drafters.eagle3_export import export
from backend.drafters.feature_chain import DraftCache
from backend.drafters.shipped import SHIPPED_DIR
from tests.helpers.trained import reduced_d2t, rounded_head


def engine_layout(hidden: int, heads: int, kv_heads: int, head_dim: int, inner: int, vd: int, vocab: int) -> dict:
    """The names and shapes the engines load, from vLLM's LlamaModel.load_weights (`midlayer.` -> `layers.0.`,
    q/k/v stacked into qkv_proj of input 2 * hidden, gate/up into gate_up_proj), Eagle3LlamaForCausalLM
    (lm_head [draft_vocab_size, hidden], d2t -> draft_id_to_target_id [draft_vocab_size], t2d skipped) and
    SGLang's LlamaForCausalLMEagle3.load_weights (the same names; fc [hidden, 3 * target_hidden_size])."""
    return {
        "fc.weight": (hidden, 3 * hidden),
        "midlayer.input_layernorm.weight": (hidden,),
        "midlayer.hidden_norm.weight": (hidden,),
        "midlayer.self_attn.q_proj.weight": (heads * head_dim, 2 * hidden),
        "midlayer.self_attn.k_proj.weight": (kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.v_proj.weight": (kv_heads * head_dim, 2 * hidden),
        "midlayer.self_attn.o_proj.weight": (hidden, heads * head_dim),
        "midlayer.post_attention_layernorm.weight": (hidden,),
        "midlayer.mlp.gate_proj.weight": (inner, hidden),
        "midlayer.mlp.up_proj.weight": (inner, hidden),
        "midlayer.mlp.down_proj.weight": (hidden, inner),
        "norm.weight": (hidden,),
        "lm_head.weight": (vd, hidden),
        "d2t": (vd,),
        "t2d": (vocab,),
    }


@pytest.fixture
def reduced_head(tiny):
    return rounded_head(eagle3, tiny, reduced_d2t())


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_export_has_every_tensor_and_config_key_the_engines_read(tiny, reduced_head, engine, tmp_path):
    out = export(reduced_head, tmp_path, engine)
    tensors = load_file(str(out / "model.safetensors"))
    expected = engine_layout(hidden=64, heads=4, kv_heads=2, head_dim=16, inner=128, vd=13, vocab=64)
    assert {name: tuple(tensor.shape) for name, tensor in tensors.items()} == expected
    assert tensors["d2t"].dtype == torch.int64 and tensors["t2d"].dtype == torch.bool
    assert tensors["fc.weight"].dtype == torch.float16

    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"] and config["model_type"] == "llama"
    assert (config["num_hidden_layers"], config["hidden_size"], config["target_hidden_size"]) == (1, 64, 64)
    assert (config["num_attention_heads"], config["num_key_value_heads"], config["head_dim"]) == (4, 2, 16)
    assert (config["intermediate_size"], config["vocab_size"], config["draft_vocab_size"]) == (128, 64, 13)
    assert config["tie_word_embeddings"] is False  # SGLang reuses embed_tokens as lm_head when it is true
    assert config["norm_before_residual"] is False
    assert config["rms_norm_eps"] == tiny.model.config.rms_norm_eps
    assert config["rope_theta"] == tiny.model.config.rope_parameters["rope_theta"]
    if engine == "vllm":  # id j = the input of decoder layer j, our hidden-state index
        assert config["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3] and "eagle_config" not in config
    else:  # SGLang captures the input of layer id + 1
        assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [0, 1, 2]
        assert "eagle_aux_hidden_state_layer_ids" not in config

    parsed = AutoConfig.from_pretrained(out)  # what both engines read it with
    assert isinstance(parsed, LlamaConfig) and parsed.draft_vocab_size == 13 and parsed.head_dim == 16


def test_d2t_and_t2d_map_tokens_the_way_the_engines_apply_them(reduced_head, tmp_path):
    tensors = load_file(str(export(reduced_head, tmp_path, "vllm") / "model.safetensors"))
    draft_ids = torch.arange(13)
    # vLLM compute_logits: targets = arange(draft_vocab_size) + draft_id_to_target_id
    assert (draft_ids + tensors["d2t"]).tolist() == reduced_d2t().tolist()
    logits = torch.randn(2, 13)
    full = logits.new_full((2, 64), float("-inf"))
    full[:, draft_ids + tensors["d2t"]] = logits
    assert torch.equal(full.argmax(-1), reduced_d2t()[logits.argmax(-1)])  # a drafted token lands on its id
    assert tensors["t2d"].nonzero()[:, 0].tolist() == reduced_d2t().tolist()


def test_a_whole_vocabulary_head_exports_identity_offsets(tiny, tmp_path):
    tensors = load_file(str(export(rounded_head(eagle3, tiny), tmp_path, "vllm") / "model.safetensors"))
    assert tensors["d2t"].tolist() == [0] * 64 and bool(tensors["t2d"].all())


def rebuilt(tiny, folder) -> eagle3.Eagle3Head:
    """Our head from an exported folder (the inverse of the engines' names)."""
    config = json.loads((folder / "config.json").read_text())
    tensors = load_file(str(folder / "model.safetensors"))
    ours = {
        "fc": "fc",
        "midlayer.input_layernorm": "embed_norm",
        "midlayer.hidden_norm": "hidden_norm",
        "midlayer.post_attention_layernorm": "layer.post_attention_norm",
        "norm": "norm",
        "lm_head": "lm_head",
    }
    state = {}
    for name, tensor in tensors.items():
        if name in ("d2t", "t2d"):
            continue
        module, _, kind = name.rpartition(".")
        module = ours.get(module) or "layer." + module.rpartition(".")[2]  # self_attn.q_proj -> layer.q_proj
        state[f"{module}.{kind}"] = tensor.float()
    settings = {
        "layers": config["eagle_aux_hidden_state_layer_ids"],
        "draft_vocab_size": config["draft_vocab_size"],
        "intermediate_size": config["intermediate_size"],
    }
    d2t = torch.arange(config["draft_vocab_size"]) + tensors["d2t"]
    head = eagle3.new_head(tiny, settings, d2t=d2t)
    head.load_state_dict(state)
    return head.eval()


def chain_logits(head: eagle3.Eagle3Head, hidden: dict[int, torch.Tensor], ids: torch.Tensor) -> list[torch.Tensor]:
    """Our drafting path: step 0 over every position of ids [1, T], then a step 1 from the last one; logits
    placed over the whole vocabulary ([n, V], -inf outside the draft vocabulary)."""
    cache, length = DraftCache(), ids.shape[1]
    h = head.step(head.embed(ids), head.begin(head.features(hidden)), torch.arange(length)[None], cache)
    h_next = head.step(head.embed(ids[:, :1]), h[:, -1:], torch.tensor([[length]]), cache)
    out = []
    for state in (h[0], h_next[0]):
        logits = head.logits(state)
        out.append(
            logits.new_full((logits.shape[0], head.parts.vocab_size), float("-inf")).index_copy(1, head.d2t, logits)
        )
    return out


def random_states(tiny, length: int = 7) -> dict[int, torch.Tensor]:
    torch.manual_seed(5)
    return {layer: torch.randn(1, length, 64) for layer in range(5)}


def distinct_head(tiny, layers: tuple[int, ...]) -> eagle3.Eagle3Head:
    """A reduced-vocabulary head whose four norms differ (a swapped norm changes its logits) and whose weights
    survive fp16 storage exactly."""
    head = eagle3.new_head(tiny, {"layers": list(layers)}, d2t=reduced_d2t()).eval()
    torch.manual_seed(11)
    with torch.no_grad():
        for name, parameter in head.named_parameters():
            if "norm" in name:
                parameter.uniform_(0.5, 1.5)
            parameter.copy_(parameter.half().float())
    return head


@pytest.mark.parametrize("layers", [(1, 2, 3), (3, 1, 2)])
def test_our_head_rebuilt_from_the_export_gives_identical_logits(tiny, layers, tmp_path):
    head = distinct_head(tiny, layers)
    with torch.no_grad():
        copy = rebuilt(tiny, export(head, tmp_path, "vllm"))
        assert copy.config.layers == (1, 2, 3)  # out-of-order fused states are exported in layer order
        hidden, ids = random_states(tiny), torch.randint(0, 64, (1, 7))
        for original, again in zip(chain_logits(head, hidden, ids), chain_logits(copy, hidden, ids), strict=True):
            if layers == (1, 2, 3):
                assert torch.equal(original, again)
            else:  # the same sums over fc's permuted columns, added in another order
                torch.testing.assert_close(original, again, rtol=1e-5, atol=1e-5)


def rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def engine_step(w: dict, cfg: dict, embeds, hidden, positions, past: list) -> tuple[torch.Tensor, torch.Tensor]:
    """vLLM's Eagle3 LlamaDecoderLayer (layer 0, norm_before_residual false) and final norm, from the exported
    tensors: returns (normed for the LM head, pre-norm fed back). `past` holds earlier (k, v) of the draft."""
    eps, heads, kv, d = cfg["rms_norm_eps"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    x = torch.cat(
        [rms(embeds, w["midlayer.input_layernorm.weight"], eps), rms(hidden, w["midlayer.hidden_norm.weight"], eps)], -1
    )
    n = x.shape[1]
    q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(1, n, heads, d).transpose(1, 2)
    k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(1, n, kv, d).transpose(1, 2)
    v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(1, n, kv, d).transpose(1, 2)
    cos, sin = LlamaRotaryEmbedding(LlamaConfig(**{k: v for k, v in cfg.items() if k != "architectures"}))(x, positions)
    q, k = apply_rotary_pos_emb(q, k, cos, sin)
    past.append((k, v))
    keys, values = torch.cat([p[0] for p in past], 2), torch.cat([p[1] for p in past], 2)
    mask = torch.ones(n, keys.shape[2], dtype=torch.bool).tril(keys.shape[2] - n)
    a = torch.nn.functional.scaled_dot_product_attention(q, keys, values, attn_mask=mask, enable_gqa=True)
    h = hidden + a.transpose(1, 2).reshape(1, n, heads * d) @ w["midlayer.self_attn.o_proj.weight"].T
    m = rms(h, w["midlayer.post_attention_layernorm.weight"], eps)
    gate, up = m @ w["midlayer.mlp.gate_proj.weight"].T, m @ w["midlayer.mlp.up_proj.weight"].T
    out = h + (torch.nn.functional.silu(gate) * up) @ w["midlayer.mlp.down_proj.weight"].T
    return rms(out, w["norm.weight"], eps), out


def test_the_engines_forward_on_the_export_matches_our_head(tiny, tmp_path):
    head = distinct_head(tiny, (3, 1, 2))
    out = export(head, tmp_path, "vllm", dtype=torch.float32)
    w = {name: t for name, t in load_file(str(out / "model.safetensors")).items()}
    cfg = json.loads((out / "config.json").read_text())
    hidden, ids = random_states(tiny), torch.randint(0, 64, (1, 7))
    embed = tiny.model.get_input_embeddings()
    with torch.no_grad():
        fused = torch.cat([hidden[layer] for layer in cfg["eagle_aux_hidden_state_layer_ids"]], -1) @ w["fc.weight"].T
        past, targets = [], torch.arange(13) + w["d2t"]
        normed, pre = engine_step(w, cfg, embed(ids), fused, torch.arange(7)[None], past)
        normed_next, _ = engine_step(w, cfg, embed(ids[:, :1]), pre[:, -1:], torch.tensor([[7]]), past)
        theirs = []
        for state in (normed[0], normed_next[0]):
            full = torch.full((state.shape[0], 64), float("-inf"))
            full[:, targets] = state @ w["lm_head.weight"].T
            theirs.append(full)
        for ours, engine in zip(chain_logits(head, hidden, ids), theirs, strict=True):
            torch.testing.assert_close(ours, engine, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"layers": [1, 3]}, "exactly three distinct target states"),
        ({"layers": [2, 2, 3]}, "exactly three distinct target states"),
        ({"layers": [0, 1, 2]}, "inputs of decoder layers 1..3 only"),
        ({"layers": [1, 2, 4]}, "inputs of decoder layers 1..3 only"),
    ],
)
def test_heads_the_engines_cannot_feed_are_refused(tiny, settings, message, tmp_path):
    with pytest.raises(SpecScopeError, match=message):
        export(eagle3.new_head(tiny, settings), tmp_path, "vllm")
    assert not (tmp_path / "model.safetensors").exists()


def test_an_unknown_engine_and_a_repeated_draft_token_are_refused(tiny, tmp_path):
    with pytest.raises(SpecScopeError, match="unknown engine 'trtllm'"):
        export(eagle3.new_head(tiny), tmp_path, "trtllm")
    with pytest.raises(SpecScopeError, match="repeats target tokens"):
        export(eagle3.new_head(tiny, d2t=torch.tensor([4, 5, 5, 6])), tmp_path, "sglang")


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_the_shipped_head_exports_in_the_engines_layout(default_model, engine, tmp_path):
    head = eagle3.load(SHIPPED_DIR / "eagle3-smollm2", default_model).head
    out = export(head, tmp_path, engine)
    tensors = load_file(str(out / "model.safetensors"))
    expected = engine_layout(hidden=576, heads=9, kv_heads=3, head_dim=64, inner=1536, vd=6144, vocab=49152)
    assert {name: tuple(tensor.shape) for name, tensor in tensors.items()} == expected
    config = json.loads((out / "config.json").read_text())
    layers = (
        config["eagle_aux_hidden_state_layer_ids"]
        if engine == "vllm"
        else config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]
    )
    assert layers == ([2, 15, 27] if engine == "vllm" else [1, 14, 26])  # vLLM's default (2, L // 2, L - 3)
    assert (config["vocab_size"], config["draft_vocab_size"], config["rope_theta"]) == (49152, 6144, 100000.0)
    assert (torch.arange(6144) + tensors["d2t"]).tolist() == head.d2t.tolist()
