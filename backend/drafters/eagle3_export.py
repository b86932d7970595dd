"""Write a trained EAGLE-3 head (eagle3.py) as the checkpoint folder vLLM and SGLang load for EAGLE-3:
`config.json` (a one-layer Llama config, architectures ["LlamaForCausalLMEagle3"]) and `model.safetensors`.

The layout, read from the engines' sources (our own code, following them):
- vLLM `vllm/model_executor/models/llama_eagle3.py`: `LlamaModel.load_weights` renames `midlayer.` to
  `layers.0.` and stacks q/k/v and gate/up; `Eagle3LlamaForCausalLM.load_weights` maps `d2t` to
  `draft_id_to_target_id`, skips `t2d`, and shares the target's `embed_tokens` when the checkpoint has
  none; `compute_logits` places draft logit i at target id i + d2t[i]. `fc` is `3 * target_hidden_size`
  wide; `draft_vocab_size` sizes `lm_head`. The layer normalises the embedding (`input_layernorm`) and the
  hidden state (`hidden_norm`), concatenates [embedding; hidden] and keeps the un-normed hidden state as
  the residual (`norm_before_residual` false); the final `norm` feeds the LM head, and its pre-norm sum is
  the next step's hidden state. `vllm/model_executor/models/registry.py` maps "LlamaForCausalLMEagle3" to
  that class. The target layers come from the draft config's top-level `eagle_aux_hidden_state_layer_ids`
  (`_get_eagle3_aux_layers_from_config` in `vllm/v1/worker/gpu_model_runner.py`); id j captures the input
  of decoder layer j (`vllm/model_executor/models/llama.py`), which is Hugging Face's hidden_states[j],
  our numbering.
- SGLang `python/sglang/srt/models/llama_eagle3.py`: the same names and maths (`d2t` read as offsets into
  `hot_token_id`, `t2d` ignored, `lm_head` only when `tie_word_embeddings` is false). The layers come from
  `eagle_config.eagle_aux_hidden_state_layer_ids` (`python/sglang/srt/model_executor/model_runner.py`), and
  `set_eagle3_layers_to_capture` (`python/sglang/srt/models/llama.py`) captures the input of layer id + 1:
  SGLang's id is our index minus one. SGLang's layer has no biases, and it drops names it does not know.
- Key names as in SafeAILab's EAGLE-3 checkpoints (e.g. yuhuili/EAGLE3-LLaMA3.1-Instruct-8B).

No `embed_tokens` is written: both engines then share the target's, as our head does (eagle3.py).
So the two engines read the same tensors and differ only in where the config names the target layers:
the `engine` argument picks that key. What cannot be expressed raises a SpecScopeError instead of writing
a checkpoint that would load but compute something else: a head fusing other than three target states,
states the engines cannot capture (the embeddings, index 0, or the final normed state, index L), a
parameter without a counterpart (e.g. biases for SGLang), a draft vocabulary with repeated tokens.
Fused states given out of order are exported in layer order, fc's column blocks permuted to match.

Knows nothing about training, drafting or how the engines are started.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file

from backend.core.errors import SpecScopeError
from backend.drafters.eagle3 import Eagle3Head

ENGINES = ("vllm", "sglang")
ARCHITECTURE = "LlamaForCausalLMEagle3"
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FUSED_STATES = 3  # both engines size fc as 3 * target_hidden_size

MODULES = {  # our module -> the engines' checkpoint module
    "fc": "fc",
    "embed_norm": "midlayer.input_layernorm",
    "hidden_norm": "midlayer.hidden_norm",
    "layer.q_proj": "midlayer.self_attn.q_proj",
    "layer.k_proj": "midlayer.self_attn.k_proj",
    "layer.v_proj": "midlayer.self_attn.v_proj",
    "layer.o_proj": "midlayer.self_attn.o_proj",
    "layer.post_attention_norm": "midlayer.post_attention_layernorm",
    "layer.gate_proj": "midlayer.mlp.gate_proj",
    "layer.up_proj": "midlayer.mlp.up_proj",
    "layer.down_proj": "midlayer.mlp.down_proj",
    "norm": "norm",
    "lm_head": "lm_head",
}


def aux_layer_ids(head: Eagle3Head, engine: str) -> list[int]:
    """The fused target states in layer order, as `engine` numbers them (see the module docstring)."""
    layers, num_layers = sorted(head.config.layers), head.parts.num_layers
    if len(layers) != FUSED_STATES or len(set(layers)) != FUSED_STATES:
        raise SpecScopeError(
            f"the engines' EAGLE-3 fuses exactly three distinct target states; this head fuses {list(layers)}"
        )
    if not all(1 <= layer <= num_layers - 1 for layer in layers):
        raise SpecScopeError(
            f"the engines capture the inputs of decoder layers 1..{num_layers - 1} only; this head reads "
            f"hidden states {list(layers)}"
        )
    return layers if engine == "vllm" else [layer - 1 for layer in layers]


def checkpoint_tensors(head: Eagle3Head, engine: str, dtype: torch.dtype = torch.float16) -> dict[str, torch.Tensor]:
    """The head's weights under the engines' names in `dtype`, plus `d2t` (int64 offsets: draft id i is
    target id i + d2t[i]) [Vd] and `t2d` (bool: which target ids are drafted) [V]."""
    check_engine(engine)
    aux_layer_ids(head, engine)  # refuses heads the engines cannot feed
    order = sorted(range(FUSED_STATES), key=head.config.layers.__getitem__)
    tensors = {}
    for name, tensor in head.state_dict().items():
        module, _, kind = name.rpartition(".")
        if module not in MODULES or (engine == "sglang" and kind == "bias"):
            raise SpecScopeError(f"the {engine} EAGLE-3 checkpoint has no place for this head's parameter {name}")
        if module == "fc":  # [H, 3 * Ht]: column blocks into layer order, as the engines concatenate
            blocks = tensor.chunk(FUSED_STATES, dim=1)  # block i reads head.config.layers[i]
            tensor = torch.cat([blocks[i] for i in order], dim=1)
        tensors[f"{MODULES[module]}.{kind}"] = tensor.detach().to("cpu", dtype).contiguous()
    d2t, vocab_size = head.d2t.to("cpu", torch.long), head.parts.vocab_size
    if d2t.unique().numel() != d2t.numel():
        raise SpecScopeError("the head's draft vocabulary repeats target tokens, which d2t/t2d cannot express")
    tensors["d2t"] = (d2t - torch.arange(d2t.numel())).contiguous()  # [Vd]
    tensors["t2d"] = torch.zeros(vocab_size, dtype=torch.bool).index_fill_(0, d2t, True)  # [V]
    return tensors


def checkpoint_config(head: Eagle3Head, engine: str, dtype: torch.dtype = torch.float16) -> dict:
    """The draft's config.json: one Llama decoder layer sized and RoPE'd like the target (the head's layer
    is built from the target's config), the draft vocabulary, and the fused layers under `engine`'s key."""
    check_engine(engine)
    target, layer = head.parts.config, head.layer
    rope = dict(getattr(target, "rope_parameters", None) or {})
    if "rope_theta" not in rope:
        raise SpecScopeError("the target's RoPE settings (rope_parameters.rope_theta) cannot be read")
    scaling = {key: value for key, value in rope.items() if key != "rope_theta"}
    config = {
        "architectures": [ARCHITECTURE],
        "model_type": "llama",
        "num_hidden_layers": 1,
        "hidden_size": head.parts.hidden_size,
        "target_hidden_size": head.parts.hidden_size,
        "intermediate_size": head.config.intermediate_size,
        "num_attention_heads": target.num_attention_heads,
        "num_key_value_heads": layer.k_proj.out_features // layer.head_dim,
        "head_dim": layer.head_dim,
        "hidden_act": target.hidden_act,
        "rms_norm_eps": target.rms_norm_eps,
        "max_position_embeddings": target.max_position_embeddings,
        "rope_theta": rope["rope_theta"],
        "rope_scaling": scaling if scaling.get("rope_type", "default") != "default" else None,
        "rope_parameters": rope,
        "attention_bias": layer.q_proj.bias is not None,
        "mlp_bias": layer.gate_proj.bias is not None,
        "norm_before_residual": False,
        "tie_word_embeddings": False,
        "vocab_size": head.parts.vocab_size,
        "draft_vocab_size": head.config.draft_vocab_size,
        "bos_token_id": getattr(target, "bos_token_id", None),
        "eos_token_id": getattr(target, "eos_token_id", None),
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    layers = aux_layer_ids(head, engine)
    if engine == "vllm":
        config["eagle_aux_hidden_state_layer_ids"] = layers
    else:
        config["eagle_config"] = {"eagle_aux_hidden_state_layer_ids": layers, "use_aux_hidden_state": True}
    return config


def check_new_folder(out: str | Path) -> Path:
    """`out` as a folder an export may write: new or empty, so no weights (a trained drafter's) are overwritten."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise SpecScopeError(f"{out} already exists and is not an empty folder: export into a new folder")
    return out


def export(head: Eagle3Head, out: str | Path, engine: str, dtype: torch.dtype = torch.float16) -> Path:
    """Write `head` into the folder `out` (new or empty) as `engine`'s EAGLE-3 checkpoint; returns the folder."""
    tensors, config = checkpoint_tensors(head, engine, dtype), checkpoint_config(head, engine, dtype)
    out = check_new_folder(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SpecScopeError(f"cannot create the folder {out}: {error.strerror or error}") from error
    (out / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")
    save_file(tensors, str(out / WEIGHTS_FILE))
    return out


def check_engine(engine: str) -> None:
    if engine not in ENGINES:
        raise SpecScopeError(f"unknown engine '{engine}' for an EAGLE-3 export (known: {', '.join(ENGINES)})")
