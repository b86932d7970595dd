"""One cached forward pass of a Hugging Face causal LM, and trimming its KV cache.

The engine and the model-based drafters all run "feed these new tokens on top of the cache" and
"forget everything after position n"; this module is the one place that knows how transformers 5.x
spells those (the `cache=` keyword, `DynamicCache.crop` taking a negative count, sliding-window
layers that must record their past before they can be rolled back). It knows nothing about drafting.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from functools import cache as memoize

import torch
from transformers import DynamicCache, PreTrainedModel


@dataclass
class ForwardResult:
    logits: torch.Tensor  # [new_tokens (or logits_to_keep), V] float32
    hidden: tuple[torch.Tensor, ...] | None  # per layer index, [new_tokens, hidden], when asked for


def new_cache(model: PreTrainedModel) -> DynamicCache:
    return DynamicCache(config=model.config)


def prepare_for_rollback(cache: DynamicCache) -> None:
    """Let sliding-window layers keep what a rollback needs. Call it after the prefill, as
    transformers does, so a long prompt is not held in full by layers that would drop it."""
    cache.activate_past_recording()


def trim_cache(cache: DynamicCache, keep: int) -> None:
    """Keep the first `keep` positions. crop(0) is still called: it shrinks sliding-window layers."""
    surplus = cache.get_seq_length() - keep
    if surplus < 0:
        raise ValueError(f"cannot keep {keep} positions of a cache holding {cache.get_seq_length()}")
    cache.crop(-surplus)


@torch.inference_mode()
def cached_forward(
    model: PreTrainedModel,
    token_ids: list[int],
    cache: DynamicCache,
    want_hidden: bool = False,
    logits_to_keep: int = 0,
) -> ForwardResult:
    """Run `token_ids` (one sequence) on top of `cache`, which grows by len(token_ids).
    logits_to_keep=0 returns logits for every new position, k>0 for the last k only."""
    device = model.device
    inputs = torch.tensor([token_ids], dtype=torch.long, device=device)  # [1, T]
    kwargs = {_cache_keyword(type(model)): cache, "use_cache": True, "logits_to_keep": logits_to_keep}
    if want_hidden:
        kwargs["output_hidden_states"] = True
    out = model(input_ids=inputs, **kwargs)
    hidden = tuple(h[0] for h in out.hidden_states) if want_hidden else None
    return ForwardResult(out.logits[0].float(), hidden)


@memoize
def _cache_keyword(model_class: type) -> str:
    """transformers 5.x renamed `past_key_values` to `cache`; remote-code models may still use the old name."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"
