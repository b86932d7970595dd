"""External draft model: a separate small causal LM sharing the target's tokenizer, drafting D tokens
with D sequential forward passes over its own KV cache (Leviathan et al.; HF `assistant_model`;
vLLM `draft_model`). Probabilities are returned, so sampling verification uses the real q.

Knows nothing about the target except its vocabulary size and cost.
"""

from __future__ import annotations

import torch

from backend.core.drafter import DrafterCost
from backend.core.kv import ForwardResult
from backend.core.models import LoadedModel, check_same_tokenizer, matmul_weights
from backend.core.target_passes import compile_mode, target_passes
from backend.drafters.autoregressive import AutoregressiveSession


class DraftModelRunner:
    """The draft's passes take the target's path (`compile`): a compiled draft over a static cache
    where the target's passes are compiled and the draft's architecture allows it."""

    def __init__(self, draft: LoadedModel, vocab_size: int, compile: str = "off") -> None:
        """compile: the target's resolved mode, "on" or "off"."""
        self.draft = draft
        self.vocab_size = vocab_size
        self.passes = target_passes(draft.model, "auto" if compile == "on" else "off")
        self.passes.warm_up()  # compiled here, so no request's draft time pays for it

    def new_cache(self):
        return self.passes.new_cache(0)

    def forward(self, tokens: list[int], cache) -> ForwardResult:
        return self.passes.forward(tokens, cache, want_hidden=False, last_only=True)

    def keep(self, cache, keep: int) -> None:
        self.passes.keep(cache, keep)


class DraftModelDrafter:
    name = "draft-model"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = False

    def __init__(self, target: LoadedModel, draft: LoadedModel) -> None:
        check_same_tokenizer(target, draft)
        self.target = target
        self.draft = draft
        self.runner = DraftModelRunner(draft, target.facts.vocab_size, compile_mode(target.model, target.compile))

    def cost(self) -> DrafterCost:
        return DrafterCost(matmul_weights(self.draft.model) / self.target.layer_weights, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> AutoregressiveSession:
        return AutoregressiveSession(self.runner, self.target.eos_token_ids)
