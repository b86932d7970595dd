"""DFlash: a block-parallel drafter that reads the target's hidden states (z-lab's DFlash).

An autoregressive drafter pays one forward pass per drafted token; DFlash drafts a whole block in ONE
pass of a 1-2 layer head. The block is [anchor, MASK x D]: the anchor is the newest committed token
(the one the target scores next, at position s), the D mask slots (positions s+1 .. s+D) are the
tokens to fill. Every slot attends to the whole block (bidirectionally) and to the target's context:
the hidden states of a few target layers at every committed position before the anchor, concatenated,
projected and injected as extra keys/values into each draft layer's attention:

    ctx_t    = RMSNorm(W_c [h_t^(l1); ...; h_t^(lm)])                                  t < s
    K_i, V_i = [W^K_i ctx ; W^K_i x_blk], [W^V_i ctx ; W^V_i x_blk]     queries from the block only
    q_k      = softmax(W_d norm(layers(x_blk))_k)       slot k predicts the token at position s + k

The head borrows the target's token embeddings (frozen, not in its state dict) and owns a reduced
vocabulary LM head whose rows start as the target's LM-head rows d2t. It trains on anchored blocks
against the target's own next-token distribution restricted to d2t (as z-lab's DFlash trainer does);
sessions, anchored blocks and the block losses are block_drafting.py's, shared with DSpark, which uses
this head as its backbone.

Knows nothing about acceptance, the engine's caches or the training loop.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from backend.core.drafter import DrafterCost
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, matmul_weights
from backend.drafters import head_io
from backend.drafters.block_drafting import (
    BlockDrafter,
    ContextKV,
    anchored_blocks,
    block_kl,
    expected_accepted,
    position_weights,
    top1_by_position,
)
from backend.drafters.draft_layer import DraftLayer, rms_norm
from backend.drafters.spec import trained_spec
from backend.drafters.trained import TargetParts, TrainBatch, TrainedHead

KIND = "dflash"
FEATURE_NOISE = False  # not a FeatureHead: train --feature-noise is refused
# parameter names of folders written before DFlash's layers became the shared draft layer (draft_layer.py)
LEGACY_LAYER_NAMES = {
    "q": "q_proj",
    "k": "k_proj",
    "v": "v_proj",
    "o": "o_proj",
    "attn_norm": "input_norm",
    "mlp_norm": "post_attention_norm",
    "gate": "gate_proj",
    "up": "up_proj",
    "down": "down_proj",
}
_LEGACY_LAYER_KEY = re.compile(r"(^|\.)(layers\.\d+\.)(" + "|".join(LEGACY_LAYER_NAMES) + r")\.")


def spread_layers(num_layers: int, count: int = 3) -> tuple[int, ...]:
    """`count` hidden-state indices (HF numbering) spread from the first layer's output, 1, to the last
    layer's input, L - 1: never 0 (embeddings) nor L (the final, normed state)."""
    top = max(num_layers - 1, 1)
    return tuple(sorted({min(top, round(1 + i * (top - 1) / max(count - 1, 1))) for i in range(count)}))


@dataclass(frozen=True)
class DFlashConfig:
    kind: ClassVar[str] = KIND
    target_layers: tuple[int, ...] = ()  # hidden-state indices fused into the context; () = spread_layers(L)
    num_layers: int = 1  # draft decoder layers
    block_size: int = 8  # drafts per block: the block is the anchor then this many mask slots
    draft_vocab_size: int = head_io.DEFAULT_DRAFT_VOCAB  # rows of the draft LM head (at most the target's V)

    @classmethod
    def for_target(cls, parts: TargetParts, **settings) -> DFlashConfig:
        settings = head_io.checked_settings(cls, cls.kind, settings)
        config = cls(**settings)
        config = replace(
            config,
            target_layers=tuple(config.target_layers or spread_layers(parts.num_layers)),
            draft_vocab_size=settings.get("draft_vocab_size", min(config.draft_vocab_size, parts.vocab_size)),
        )
        if not all(0 <= layer <= parts.num_layers for layer in config.target_layers):
            raise SpecScopeError(
                f"target layers {list(config.target_layers)} are outside 0..{parts.num_layers} for this target"
            )
        if config.num_layers < 1 or config.block_size < 1:
            raise SpecScopeError(f"a {cls.kind} head needs at least one layer and one draft per block")
        head_io.check_vocabulary(config.draft_vocab_size, parts)
        return config

    def to_dict(self) -> dict:
        return {**asdict(self), "target_layers": list(self.target_layers)}


@dataclass
class ContextAttention:
    """A block's attention: its queries see the injected context's keys/values [B, kv, C, d], then the block's
    own; mask [B, 1, N, C + N] (True = may attend) or None (everything)."""

    keys: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor | None

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        keys, values = torch.cat([self.keys, k], dim=2), torch.cat([self.values, v], dim=2)  # [B, kv, C + N, d]
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=self.mask, enable_gqa=True)


class DFlashHead(TrainedHead):
    kind = KIND
    config_class = DFlashConfig

    def __init__(self, parts: TargetParts, config: DFlashConfig, d2t: torch.Tensor) -> None:
        super().__init__(parts, config, d2t)
        hidden = parts.hidden_size
        self.fc = nn.Linear(len(config.target_layers) * hidden, hidden, bias=False)
        self.hidden_norm = rms_norm(hidden, parts.config)
        self.layers = nn.ModuleList(
            DraftLayer(parts.config, hidden, parts.config.intermediate_size, input_norm=True, qk_norm=True)
            for _ in range(config.num_layers)
        )
        self.norm = rms_norm(hidden, parts.config)
        embeddings = parts.embed.weight.detach()
        self.mask_embedding = nn.Parameter(embeddings.float().mean(dim=0).cpu())  # [H] marks "to fill"
        self.lm_head = nn.Linear(hidden, d2t.numel(), bias=False)  # [Vd, H]
        with torch.no_grad():
            self.lm_head.weight.copy_(parts.lm_head.weight.detach()[self.d2t])

    @classmethod
    def upgrade_state(cls, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Rename the draft layers' parameters of folders written before the shared draft layer."""
        return {
            _LEGACY_LAYER_KEY.sub(lambda m: f"{m[1]}{m[2]}{LEGACY_LAYER_NAMES[m[3]]}.", name): tensor
            for name, tensor in state.items()
        }

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.config.target_layers

    def encode_context(self, hidden: dict[int, torch.Tensor], positions: torch.Tensor) -> ContextKV:
        """hidden: per fused layer [B, C, H] target states at positions [B, C] -> every layer's context K/V."""
        dtype = self.fc.weight.dtype
        features = torch.cat([hidden[layer].to(dtype) for layer in self.config.target_layers], dim=-1)  # [B, C, mH]
        context = self.hidden_norm(self.fc(features))  # [B, C, H]
        pairs = [layer.keys_values(context, positions) for layer in self.layers]
        return ContextKV([k for k, _ in pairs], [v for _, v in pairs])

    @torch.no_grad()
    def empty_context(self, batch: int = 1) -> ContextKV:
        return self.encode_context(
            {layer: self.fc.weight.new_zeros(batch, 0, self.parts.hidden_size) for layer in self.config.target_layers},
            torch.zeros(batch, 0, dtype=torch.long, device=self.fc.weight.device),
        )

    def forward(
        self,
        anchors: torch.Tensor,
        anchor_positions: torch.Tensor,
        context: ContextKV,
        visible: torch.Tensor | None = None,
        drafts: int | None = None,
    ) -> torch.Tensor:
        """K blocks per row, all in one pass: anchors, anchor_positions [B, K]; visible [B, K, C] says which
        context positions each block may see (None: all). Returns the normed hidden states [B, K, 1 + D, H];
        slot 0 is the anchor's (unused), slot k predicts the token at anchor position + k."""
        b, k = anchors.shape
        slots = 1 + (drafts or self.config.block_size)
        anchor_x = self.embed(anchors).to(self.mask_embedding.dtype)  # [B, K, H]
        masks = self.mask_embedding.expand(b, k, slots - 1, -1)  # [B, K, D, H]
        x = torch.cat([anchor_x[:, :, None], masks], dim=2).flatten(1, 2)  # [B, K(1+D), H]
        offsets = torch.arange(slots, device=anchors.device)
        positions = (anchor_positions[..., None] + offsets).flatten(1)  # [B, K(1+D)]
        mask = None if visible is None and k == 1 else self._mask(visible, b, k, slots, context.length)
        for layer, keys, values in zip(self.layers, context.keys, context.values, strict=True):
            x = layer(x, positions, ContextAttention(keys, values, mask))
        return self.norm(x).view(b, k, slots, -1)

    def _mask(self, visible: torch.Tensor | None, b: int, k: int, slots: int, length: int) -> torch.Tensor:
        """[B, 1, K(1+D), C + K(1+D)]: a block sees its visible context and itself, never other blocks."""
        device = self.fc.weight.device
        if visible is None:
            visible = torch.ones(b, k, length, dtype=torch.bool, device=device)
        context = visible.repeat_interleave(slots, dim=1)  # [B, N, C]
        same_block = torch.eye(k, dtype=torch.bool, device=device).repeat_interleave(slots, 0)
        same_block = same_block.repeat_interleave(slots, 1)  # [N, N]
        return torch.cat([context, same_block.expand(b, -1, -1)], dim=-1)[:, None]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)  # [..., Vd]


class DFlashDrafter(BlockDrafter):
    name = KIND
    head_class = DFlashHead

    def cost(self) -> DrafterCost:
        """One pass (fc + draft layers + draft LM head) drafts a whole block: its weights per block slot."""
        per_pass = matmul_weights(self.head) / self.target.layer_weights
        return DrafterCost(per_pass / self.head.config.block_size, self.target.tle_per_forward)


# --- the trained-kind interface (the training loop's, the same for every kind) ------------------------


def training_layers(target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
    """The hidden states a TrainBatch must carry for a DFlash or DSpark head with these settings: the fused
    layers, then L (the final normed state, the source of the soft targets)."""
    num_layers = target.facts.num_layers
    return tuple(sorted({*((settings or {}).get("target_layers") or spread_layers(num_layers)), num_layers}))


def new_head(
    target: LoadedModel,
    settings: dict | None = None,
    token_counts: torch.Tensor | None = None,
    d2t: torch.Tensor | None = None,
) -> DFlashHead:
    """An untrained head; settings are DFlashConfig fields; the vocabulary as in head_io.new_head."""
    return head_io.new_head(DFlashHead, target, settings, token_counts, d2t)


def training_loss(
    head: DFlashHead,
    parts: TargetParts,
    batch: TrainBatch,
    block_size: int | None = None,
    anchors_per_row: int = 16,
    decay: float | None = 4.0,
) -> tuple[torch.Tensor, dict]:
    """Position-weighted KL to the target's distribution on anchored blocks (anchors drawn from torch's
    global generator); metrics per slot."""
    blocks = anchored_blocks(head, parts, batch, block_size, anchors_per_row)
    logits = head.logits(blocks.hidden)  # [B, K, D, Vd]
    loss = block_kl(logits, blocks, position_weights(logits.shape[2], decay, logits.device))
    top1 = top1_by_position(logits, blocks)
    return loss, {"loss": float(loss.detach()), "top1": top1, "expected_accepted": expected_accepted(top1)}


def drafter(target: LoadedModel, head: DFlashHead) -> DFlashDrafter:
    return DFlashDrafter(target, head)


def save(head: DFlashHead, target: LoadedModel, folder: str | Path) -> Path:
    return head_io.save(head, target, folder)


def load_trained(target: LoadedModel, folder: str | Path) -> tuple[DFlashHead, dict]:
    return head_io.trained_head(DFlashHead, folder, target)


def load(folder: str | Path, target: LoadedModel) -> DFlashDrafter:
    return DFlashDrafter.load(folder, target)


SPEC = trained_spec(
    KIND,
    "DFlash: a block head drafts every position of a block in one pass from the target's hidden states",
    load,
    lambda target: drafter(target, new_head(target)),
    trees=True,
)
