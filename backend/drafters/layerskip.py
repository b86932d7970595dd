"""Layer-skip self-speculation: the target's first k decoder layers, then its own final norm and LM
head, draft D tokens (early exit, as in LayerSkip and HF `assistant_early_exit`). The weights are the
target's; only the KV cache is separate. Token trees as the draft-model drafter's (autoregressive.py).

The truncated model is the target with `num_hidden_layers` set to k during the draft forwards (what
transformers' own early-exit candidate generator does), so any architecture whose decoder loop reads
that config field works. An untrained model exits early poorly: the acceptance this gives is the
honest baseline that LayerSkip-style training would improve.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from backend.core.drafter import DrafterCost
from backend.core.errors import SpecScopeError
from backend.core.kv import ForwardResult, cached_forward, new_cache, trim_cache
from backend.core.models import LoadedModel, matmul_weights
from backend.drafters.autoregressive import AutoregressiveSession
from backend.drafters.spec import DrafterSpec, option


class LayerSkipRunner:
    def __init__(self, target: LoadedModel, exit_layer: int) -> None:
        self.model = target.model
        self.exit_layer = exit_layer
        self.vocab_size = target.facts.vocab_size

    @contextmanager
    def _first_layers(self) -> Iterator[None]:
        config = self.model.get_decoder().config
        full = config.num_hidden_layers
        config.num_hidden_layers = self.exit_layer
        try:
            yield
        finally:
            config.num_hidden_layers = full

    def new_cache(self):
        with self._first_layers():
            return new_cache(self.model)

    def forward(self, tokens: list[int], cache) -> ForwardResult:
        with self._first_layers():
            return cached_forward(self.model, tokens, cache, logits_to_keep=1)

    def keep(self, cache, keep: int) -> None:
        trim_cache(cache, keep)


class LayerSkipDrafter:
    name = "layerskip"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = False

    def __init__(self, target: LoadedModel, exit_layer: int | None = None) -> None:
        layers = target.facts.num_layers
        exit_layer = layers // 2 if exit_layer is None else exit_layer
        if not 1 <= exit_layer < layers:
            raise SpecScopeError(
                f"layerskip exit layer must be between 1 and {layers - 1} for this target, got {exit_layer}"
            )
        self.target = target
        self.exit_layer = exit_layer
        self.runner = LayerSkipRunner(target, exit_layer)

    def cost(self) -> DrafterCost:
        head = matmul_weights(self.target.model.get_output_embeddings()) / self.target.layer_weights
        return DrafterCost(self.exit_layer + head, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> AutoregressiveSession:
        return AutoregressiveSession(self.runner, self.target.eos_token_ids)


@dataclass(frozen=True)
class LayerSkipOptions:
    layerskip_exit_layer: int | None = option(
        None, "layers used to draft (default: half the target's)", ge=1, label="exit after layer"
    )


SPEC = DrafterSpec(
    "layerskip",
    "self-speculation: the target's first layers and its own LM head draft",
    LayerSkipOptions,
    lambda target, options, load: LayerSkipDrafter(target, options.layerskip_exit_layer),
    trees=True,
)
