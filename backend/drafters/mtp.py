"""MTP: a DeepSeek-V3-style multi-token-prediction module used as a drafter, one module reused for every
draft step as vLLM does with `deepseek_mtp`. SmolLM2 has no native MTP head, so this
one is trained from scratch on the target's final hidden state; it borrows the target's embeddings, final
norm and LM head (frozen, shared; optionally only the d2t rows, a cheaper deviation from DeepSeek).

    x_t  = proj([enorm(emb(x_{t+1})); hnorm(h_t)])           2H -> H (embedding first, as vLLM)
    h'_t = block(x_t)                                         one pre-norm decoder layer, RoPE position t + j
    q_t  = softmax(lm_head(final_norm(h'_t))[d2t])            a guess for x_{t+2}

h_t is the target's hs[L] (post-norm, HF numbering) at step 0 and the module's own output afterwards.
Drafting, the session and the KV-cache handling are feature_chain.py's, with the target's final state as
the only feature. Training is the recursive multi-step loss of FastMTP / speculators (own hidden fed
back, step weights beta^k normalised, beta = 0.6), with two deviations: the loss is forward KL to the
target's distribution rather than cross-entropy to the data token, and step k attends as at drafting
time (the target-fed step 0 of earlier positions plus its own chain, EAGLE-3's training-time test)
rather than causally over step-k states. Knows nothing about the engine or the training loop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call

from backend.core.models import LoadedModel
from backend.drafters import head_io
from backend.drafters.draft_layer import DraftLayer, rms_norm
from backend.drafters.feature_chain import FeatureDrafter, FeatureHead, chain_loss
from backend.drafters.head_precision import linear_in_weight_dtype
from backend.drafters.spec import trained_spec
from backend.drafters.trained import TargetParts, TrainBatch, whole_vocabulary

KIND = "mtp"
FEATURE_NOISE = True  # a FeatureHead: it can train with noise on the states it reads (train --feature-noise)
STEP_BETA = 0.6  # FastMTP's step weights beta^k / sum_j beta^j


@dataclass(frozen=True)
class MtpConfig:
    draft_vocab_size: int  # rows of the shared LM head scored: V (DeepSeek's design) or a reduced d2t set
    intermediate_size: int  # MLP width of the module's decoder layer

    @classmethod
    def for_target(cls, parts: TargetParts, **settings) -> MtpConfig:
        settings = head_io.checked_settings(cls, KIND, settings)
        config = cls(
            settings.get("draft_vocab_size", parts.vocab_size),
            settings.get("intermediate_size", parts.config.intermediate_size),
        )
        head_io.check_vocabulary(config.draft_vocab_size, parts)
        return config

    def to_dict(self) -> dict:
        return asdict(self)


class MtpHead(FeatureHead):
    kind = KIND
    config_class = MtpConfig

    def __init__(self, parts: TargetParts, config: MtpConfig, d2t: torch.Tensor) -> None:
        super().__init__(parts, config, d2t)
        hidden = parts.hidden_size
        self.embed_norm = rms_norm(hidden, parts.config)
        self.hidden_norm = rms_norm(hidden, parts.config)
        self.proj = nn.Linear(2 * hidden, hidden, bias=False)
        self.layer = DraftLayer(parts.config, hidden, config.intermediate_size, input_norm=True)
        # the shared LM head's rows, frozen and outside the state dict (a view, not a copy, for the whole vocabulary)
        weight, bias = parts.lm_head.weight.detach(), parts.lm_head.bias
        whole = whole_vocabulary(self.d2t, parts.vocab_size)
        self.register_buffer("head_weight", weight if whole else weight[self.d2t], persistent=False)  # [Vd, H]
        self.register_buffer("head_bias", None if bias is None else bias.detach()[self.d2t], persistent=False)

    @classmethod
    def upgrade_state(cls, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Folders written before the block's input norm moved into the shared draft layer name it `input_norm`."""
        return {("layer." + name if name == "input_norm.weight" else name): tensor for name, tensor in state.items()}

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return (self.parts.num_layers,)

    def begin(self, features: torch.Tensor) -> torch.Tensor:
        return features  # the target's final state, [..., H]

    def step(self, embeds: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, memory) -> torch.Tensor:
        x = self.proj(torch.cat([self.embed_norm(embeds), self.hidden_norm(h)], dim=-1))  # [B, T, 2H] -> [B, T, H]
        return self.layer(x, positions, memory)  # [B, T, H]: the block's output, fed back

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        norm = self.parts.norm  # the target's final norm, its weights detached so no gradient reaches the target
        normed = functional_call(norm, {name: p.detach() for name, p in norm.named_parameters()}, (h,))
        return linear_in_weight_dtype(normed, self.head_weight, self.head_bias)  # [..., Vd]

    def hold_frozen_rows_in(self, dtype: torch.dtype) -> None:
        """The shared LM head's rows in `dtype` while drafting (a copy: the target's own head is untouched)."""
        self.head_weight = self.head_weight.to(dtype)
        self.head_bias = None if self.head_bias is None else self.head_bias.to(dtype)

    def draft_weights(self) -> int:
        return super().draft_weights() + self.head_weight.numel()  # the shared head runs every step too


class MtpDrafter(FeatureDrafter):
    name = KIND
    head_class = MtpHead


# --- the trained-kind interface (the training loop's, the same for every kind) ------------------------


def training_layers(target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
    """Training reads the target's final hidden state only: the module's input and the soft targets."""
    MtpConfig.for_target(TargetParts.of(target), **(settings or {}))
    return (target.facts.num_layers,)


def new_head(
    target: LoadedModel,
    settings: dict | None = None,
    token_counts: torch.Tensor | None = None,
    d2t: torch.Tensor | None = None,
) -> MtpHead:
    """A fresh module scoring the whole vocabulary by default (vocabulary: see head_io.new_head). Settings:
    draft_vocab_size, intermediate_size."""
    return head_io.new_head(MtpHead, target, settings, token_counts, d2t)


def training_loss(
    head: MtpHead, parts: TargetParts, batch: TrainBatch, steps: int = 3, beta: float = STEP_BETA
) -> tuple[torch.Tensor, dict]:
    """The recursive multi-step loss over `steps` draft steps, step k weighted beta**k (chain_loss)."""
    return chain_loss(head, parts, batch, [beta**k for k in range(steps)])


def drafter(target: LoadedModel, head: MtpHead) -> MtpDrafter:
    return MtpDrafter(target, head)


def save(head: MtpHead, target: LoadedModel, folder: str | Path) -> Path:
    return head_io.save(head, target, folder)


def load_trained(target: LoadedModel, folder: str | Path) -> tuple[MtpHead, dict]:
    return head_io.trained_head(MtpHead, folder, target)


def load(folder: str | Path, target: LoadedModel) -> MtpDrafter:
    return MtpDrafter.load(folder, target)


SPEC = trained_spec(
    KIND,
    "multi-token prediction: a head on the target's last hidden state, chained over its own features",
    load,
    lambda target: drafter(target, new_head(target)),
    trees=True,
)
