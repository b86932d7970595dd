"""External draft model: a separate small causal LM sharing the target's tokenizer, drafting D tokens
with D sequential forward passes over its own KV cache (Leviathan et al.; HF `assistant_model`;
vLLM `draft_model`). Probabilities are returned, so sampling verification uses the real q.

Knows nothing about the target except its vocabulary size and cost.
"""

from __future__ import annotations

import torch

from backend.drafters.autoregressive import AutoregressiveSession
from backend.drafters.base import DrafterCost
from backend.kv import ForwardResult, cached_forward, new_cache
from backend.models import LoadedModel, check_same_tokenizer, matmul_weights


class DraftModelRunner:
    def __init__(self, draft: LoadedModel, vocab_size: int) -> None:
        self.draft = draft
        self.vocab_size = vocab_size

    def new_cache(self):
        return new_cache(self.draft.model)

    def forward(self, tokens: list[int], cache) -> ForwardResult:
        return cached_forward(self.draft.model, tokens, cache, logits_to_keep=1)


class DraftModelDrafter:
    name = "draft-model"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = False

    def __init__(self, target: LoadedModel, draft: LoadedModel) -> None:
        check_same_tokenizer(target, draft)
        self.target = target
        self.draft = draft
        self.runner = DraftModelRunner(draft, target.facts.vocab_size)

    def cost(self) -> DrafterCost:
        return DrafterCost(matmul_weights(self.draft.model) / self.target.layer_weights, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> AutoregressiveSession:
        return AutoregressiveSession(self.runner, self.target.eos_token_ids)
