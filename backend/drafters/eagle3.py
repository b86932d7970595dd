"""EAGLE-3: a one-layer draft head that fuses three of the target's hidden states and drafts a chain of
tokens, feeding its own output back (Li et al. 2025, SafeAILab/EAGLE). The chain, its
session and the training-time test are feature_chain.py's; this file holds EAGLE-3's own maths.

Alignment (HF `output_hidden_states` numbering): f_t is the target's state at
position t (the one that predicted x_{t+1}). The head at position t reads the pair (f_t, x_{t+1}) and
predicts x_{t+2}; its output h_t then replaces f_t for the next draft step:

    h^0_t = fc([hs_low; hs_mid; hs_high]_t)                          [3H] -> [H]
    h^j_t = layer([norm(emb(x_{t+j+1})); norm(h^{j-1}_t)], residual h^{j-1}_t)   2H -> H, RoPE position t + j
    q^j_t = softmax(lm_head(norm(h^j_t)))  over the Vd draft tokens d2t, a guess for x_{t+j+2}

Loss: the training-time test over 3 steps, step j weighted 0.8**j (SafeAILab's). Knows nothing about
acceptance, the engine's caches or the training loop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel
from backend.drafters import head_io
from backend.drafters.draft_layer import DraftLayer, rms_norm
from backend.drafters.feature_chain import FeatureDrafter, FeatureHead, chain_loss
from backend.drafters.spec import trained_spec
from backend.drafters.trained import TargetParts, TrainBatch

KIND = "eagle3"
FEATURE_NOISE = True  # a FeatureHead: it can train with noise on the states it reads (train --feature-noise)
STEP_DECAY = 0.8  # SafeAILab's per-step loss weight 0.8**j


def default_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low / middle / high features: the inputs of layers 2, L//2 and L-3 (HF indices; 2, 15, 27 on
    SmolLM2). Targets too shallow for those to be distinct get three indices spread over 1..L-1."""
    low, middle, high = 2, num_layers // 2, num_layers - 3
    if 1 <= low < middle < high <= num_layers - 1:
        return low, middle, high
    top = max(1, num_layers - 1)
    return tuple(round(1 + i * (top - 1) / 2) for i in range(3))


@dataclass(frozen=True)
class Eagle3Config:
    layers: tuple[int, ...]  # target hidden states fused by fc (HF numbering)
    draft_vocab_size: int  # Vd: rows of the draft LM head
    intermediate_size: int  # MLP width of the draft layer

    @classmethod
    def for_target(cls, parts: TargetParts, **settings) -> Eagle3Config:
        settings = head_io.checked_settings(cls, KIND, settings)
        config = cls(
            tuple(settings.get("layers", default_layers(parts.num_layers))),
            settings.get("draft_vocab_size", min(head_io.DEFAULT_DRAFT_VOCAB, parts.vocab_size)),
            settings.get("intermediate_size", parts.config.intermediate_size),
        )
        if not config.layers or not all(0 <= layer <= parts.num_layers for layer in config.layers):
            raise SpecScopeError(
                f"{KIND} layers must be hidden-state indices 0..{parts.num_layers}, got {list(config.layers)}"
            )
        head_io.check_vocabulary(config.draft_vocab_size, parts)
        return config

    def to_dict(self) -> dict:
        return {**asdict(self), "layers": list(self.layers)}


class Eagle3Head(FeatureHead):
    kind = KIND
    config_class = Eagle3Config

    def __init__(self, parts: TargetParts, config: Eagle3Config, d2t: torch.Tensor) -> None:
        super().__init__(parts, config, d2t)
        hidden = parts.hidden_size
        self.fc = nn.Linear(len(config.layers) * hidden, hidden, bias=False)
        self.embed_norm = rms_norm(hidden, parts.config)
        self.hidden_norm = rms_norm(hidden, parts.config)
        self.layer = DraftLayer(parts.config, 2 * hidden, config.intermediate_size)
        self.norm = rms_norm(hidden, parts.config)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        with torch.no_grad():  # start from the target's own output rows (speculators does the same)
            self.lm_head.weight.copy_(parts.lm_head.weight[self.d2t])
            if getattr(parts.norm, "weight", None) is not None:
                self.norm.weight.copy_(parts.norm.weight)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.config.layers

    def begin(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features)  # [..., 3H] -> [..., H]

    def step(self, embeds: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, memory) -> torch.Tensor:
        x = torch.cat([self.embed_norm(embeds), self.hidden_norm(h)], dim=-1)  # [B, T, 2H]: embedding first
        return self.layer(x, positions, memory, residual=h)  # [B, T, H], pre-norm: fed back as the next step's h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(h))  # [..., Vd]


class Eagle3Drafter(FeatureDrafter):
    name = KIND
    head_class = Eagle3Head


# --- the trained-kind interface (the training loop's, the same for every kind) ------------------------


def training_layers(target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
    """The hidden states training reads: the fused ones and the final one (the soft targets)."""
    config = Eagle3Config.for_target(TargetParts.of(target), **(settings or {}))
    return tuple(sorted({*config.layers, target.facts.num_layers}))


def new_head(
    target: LoadedModel,
    settings: dict | None = None,
    token_counts: torch.Tensor | None = None,
    d2t: torch.Tensor | None = None,
) -> Eagle3Head:
    """A fresh head (vocabulary: see head_io.new_head). Settings: layers, draft_vocab_size (8192 by default),
    intermediate_size."""
    return head_io.new_head(Eagle3Head, target, settings, token_counts, d2t)


def training_loss(
    head: Eagle3Head, parts: TargetParts, batch: TrainBatch, steps: int = 3, decay: float = STEP_DECAY
) -> tuple[torch.Tensor, dict]:
    """The training-time test over `steps` draft steps, step j weighted decay**j (feature_chain.chain_loss)."""
    return chain_loss(head, parts, batch, [decay**j for j in range(steps)])


def drafter(target: LoadedModel, head: Eagle3Head) -> Eagle3Drafter:
    return Eagle3Drafter(target, head)


def save(head: Eagle3Head, target: LoadedModel, folder: str | Path) -> Path:
    return head_io.save(head, target, folder)


def load_trained(target: LoadedModel, folder: str | Path) -> tuple[Eagle3Head, dict]:
    return head_io.trained_head(Eagle3Head, folder, target)


def load(folder: str | Path, target: LoadedModel) -> Eagle3Drafter:
    return Eagle3Drafter.load(folder, target)


EXPORTED_FOLDER = "<DIR written by: python -m backend export eagle3 --out DIR>"


def engine_settings(draft_len: int, folder: str = EXPORTED_FOLDER) -> dict[str, object]:
    """A chain of `draft_len` drafts from an exported head (export eagle3) as vLLM and SGLang take it: SGLang
    verifies D + 1 tokens for D steps at top-k 1. TensorRT-LLM's EAGLE-3 checkpoint layout is not exported."""
    return {
        "vllm": {"method": "eagle3", "model": folder, "num_speculative_tokens": draft_len},
        "sglang": f"--speculative-algorithm EAGLE3 --speculative-draft-model-path {folder} "
        f"--speculative-num-steps {draft_len} --speculative-eagle-topk 1 "
        f"--speculative-num-draft-tokens {draft_len + 1}",
    }


SPEC = trained_spec(
    KIND,
    "EAGLE-3: a one-layer head on the target's low, middle and high hidden states drafts autoregressively",
    load,
    lambda target: drafter(target, new_head(target)),
    trees=True,
    export=lambda draft_len, schedule, options: engine_settings(draft_len),
)
