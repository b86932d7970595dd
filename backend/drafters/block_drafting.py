"""What the block-parallel drafters (DFlash, DSpark) share: the injected context's keys and values, training
on anchored blocks (after z-lab's DFlash trainer), and the session that drafts a block
per proposal from one backbone pass: a chain, or a token tree grown from the block's distributions.

The backbone is DFlash's head (dflash.py): `encode_context(hidden, positions)`, `empty_context()`,
`forward(anchors, anchor_positions, context, visible, drafts)` -> [B, K, 1 + D, H], `logits(h)`, `d2t` and
`config.block_size`. Knows nothing about the backbone's layers, the engine or the training loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from backend.core.drafter import Draft, DraftRequest, StepOutcome
from backend.core.models import LoadedModel
from backend.drafters.head_io import TrainedDrafter
from backend.drafters.trained import (
    NO_FEATURES,
    CommittedStates,
    TargetParts,
    TrainBatch,
    TrainedHead,
    cut_after_eos,
    pick_tokens,
    target_distribution,
)
from backend.drafters.tree_growth import Tree, grow, top_children


@dataclass
class ContextKV:
    """The injected context's keys and values for every draft layer. They depend only on the target's
    features and their positions, never on the block, so a session computes them once per position."""

    keys: list[torch.Tensor]  # per draft layer [B, kv_heads, C, head_dim], RoPE applied
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].shape[2]

    def extend(self, more: ContextKV) -> ContextKV:
        return ContextKV(
            [torch.cat(pair, dim=2) for pair in zip(self.keys, more.keys, strict=True)],
            [torch.cat(pair, dim=2) for pair in zip(self.values, more.values, strict=True)],
        )


# --- training: anchored blocks ------------------------------------------------------------------------


@dataclass
class AnchoredBlocks:
    """A training batch cut into K anchored blocks per row; slot k of the block anchored at a is position
    a + k, and its target is the target's next-token distribution at a + k - 1 over the draft vocabulary."""

    hidden: torch.Tensor  # [B, K, D, H] the head's states at the mask slots
    target: torch.Tensor  # [B, K, D, Vd] the target's distribution for each slot's token
    valid: torch.Tensor  # [B, K, D] bool: the slot is inside the row and its token is a training target
    previous: torch.Tensor  # [B, K, D] the true token before each slot's (the anchor for slot 1)


def anchored_blocks(
    backbone: TrainedHead,
    parts: TargetParts,
    batch: TrainBatch,
    block_size: int | None = None,
    anchors_per_row: int = 16,
) -> AnchoredBlocks:
    """Sample anchors (positions whose next token is a training target; torch's global generator) and run all
    their blocks at once."""
    ids, loss_mask = batch.input_ids, batch.loss_mask.bool()
    (b, t), device = ids.shape, ids.device
    drafts = block_size or backbone.config.block_size
    scores = torch.rand(b, t, device=device).masked_fill(~loss_mask, -1.0)
    best = scores.topk(min(anchors_per_row, t), dim=1)
    anchors, anchored = best.indices, best.values >= 0  # [B, K]
    k = anchors.shape[1]
    time = torch.arange(t, device=device)
    context = backbone.encode_context(batch.hidden, time.expand(b, t))
    visible = time[None, None] < anchors[..., None]  # [B, K, T]: only states before the anchor
    hidden = backbone(ids.gather(1, anchors), anchors, context, visible, drafts)[:, :, 1:]  # [B, K, D, H]
    source = anchors[..., None] + torch.arange(drafts, device=device)  # [B, K, D]: a + k - 1 for slot k
    inside = source < t
    source = source.clamp(max=t - 1).flatten(1)  # [B, KD]
    valid = inside & loss_mask.gather(1, source).view(b, k, drafts) & anchored[..., None]
    final = batch.hidden[parts.num_layers]  # [B, T, H]: final normed states
    states = final.gather(1, source[..., None].expand(-1, -1, final.shape[-1]))  # [B, KD, H]
    target = target_distribution(parts, states, backbone.d2t)  # [B, KD, Vd]
    previous = ids.gather(1, source).view(b, k, drafts)
    return AnchoredBlocks(hidden, target.view(b, k, drafts, -1), valid, previous)


def position_weights(drafts: int, decay: float | None, device: torch.device) -> torch.Tensor:
    """w_k = exp(-(k - 1) / gamma) for slot k = 1..D (DFlash trainers' decay); all ones when decay is None."""
    slots = torch.arange(drafts, device=device, dtype=torch.float32)
    return torch.ones_like(slots) if decay is None else torch.exp(-slots / decay)  # [D]


def block_kl(logits: torch.Tensor, blocks: AnchoredBlocks, weights: torch.Tensor) -> torch.Tensor:
    """sum w_k KL(p_target || q_draft) / sum w_k over valid slots; logits [B, K, D, Vd]."""
    kl = F.kl_div(torch.log_softmax(logits.float(), dim=-1), blocks.target, reduction="none").sum(-1)  # [B, K, D]
    w = weights * blocks.valid
    return (kl * w).sum() / w.sum().clamp(min=1e-6)


def top1_by_position(logits: torch.Tensor, blocks: AnchoredBlocks) -> list[float]:
    """Per slot k: how often the draft's argmax equals the target's (over the draft vocabulary)."""
    hits = (logits.argmax(-1) == blocks.target.argmax(-1)) & blocks.valid  # [B, K, D]
    return (hits.sum((0, 1)) / blocks.valid.sum((0, 1)).clamp(min=1)).tolist()


def expected_accepted(top1: list[float]) -> float:
    """sum_k prod_{i<=k} acc_i: drafts a greedy block would get accepted if slots failed independently."""
    return sum(math.prod(top1[: k + 1]) for k in range(len(top1)))


# --- drafting -----------------------------------------------------------------------------------------


class BlockSession:
    """Keeps the context K/V of every committed position; each proposal is one backbone pass."""

    def __init__(self, drafter: BlockDrafter, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> None:
        self.drafter, self.backbone = drafter, drafter.backbone
        self.context = self.backbone.empty_context()  # K/V of every committed position whose states arrived
        self.states = CommittedStates(tuple(self.backbone.config.target_layers))
        self.states.receive(prompt_hidden, len(prompt) - 1)

    def _encode_new_states(self) -> None:
        new = self.states.take()
        if new is None:
            return
        rows = {layer: states[None] for layer, states in new.items()}  # [1, n, H]
        start = self.context.length
        positions = torch.arange(start, start + next(iter(rows.values())).shape[1], device=self.backbone.d2t.device)
        self.context = self.context.extend(self.backbone.encode_context(rows, positions[None]))

    @torch.inference_mode()
    def propose(self, request: DraftRequest) -> Draft:
        anchor_position = len(request.tokens) - 1
        wanted = min(request.max_tokens, self.backbone.config.block_size)
        if wanted < 1:
            return Draft([])
        if not self.states.ready(anchor_position):
            return Draft([], stop_reason=NO_FEATURES)
        self._encode_new_states()
        device = self.backbone.d2t.device
        anchor = torch.tensor([[request.tokens[-1]]], device=device)  # [1, 1]
        hidden = self.backbone(anchor, torch.tensor([[anchor_position]], device=device), self.context)  # [1,1,1+D,H]
        slots = hidden[0, 0, 1 : 1 + wanted]  # [n, H]
        draft = (self.draft_tree if request.max_nodes > 0 else self.draft)(slots, request.tokens[-1], request)
        if draft.stop_reason is None and wanted < request.max_tokens:
            draft.stop_reason = "block-size"
        return draft

    def draft(self, hidden: torch.Tensor, anchor: int, request: DraftRequest) -> Draft:
        """hidden [n, H] for slots 1..n -> the draft (every slot independently), cut after an EOS."""
        tokens, probs, confidence = pick_tokens(
            self.backbone.logits(hidden), self.backbone.d2t, self.drafter.vocab_size, request
        )
        return cut_after_eos(tokens, probs, confidence, self.drafter.eos_ids, len(tokens))

    def draft_tree(self, hidden: torch.Tensor, anchor: int, request: DraftRequest) -> Draft:
        """hidden [n, H] for slots 1..n -> a token tree: every slot's distribution is the same whatever the
        tokens before it, so a node at depth j is among slot j's top-`branching` tokens (tree_growth.grow)."""
        probs = torch.softmax(self.backbone.logits(hidden).float(), dim=-1)  # [n, Vd]
        below = top_children(probs, request.branching, self.backbone.d2t)  # slot j's candidates: below[j - 1]
        eos = self.drafter.eos_ids
        tree = grow(anchor, lambda token, depth, state: below[depth], request.max_nodes, len(below), eos)
        return tree.draft(tree_stop_reason(tree, len(below), eos))

    def observe(self, outcome: StepOutcome) -> None:
        self.states.receive(outcome.hidden, len(outcome.committed))

    def close(self) -> None:
        self.context, self.states = self.backbone.empty_context(), CommittedStates(self.states.layers)


def tree_stop_reason(tree: Tree, wanted: int, eos_ids: set[int]) -> str | None:
    """Why a tree is shallower than `wanted`: "eos" when it holds an end-of-sequence token, else None (its
    budget)."""
    return "eos" if tree.depth < wanted and any(token in eos_ids for token in tree.tokens) else None


class BlockDrafter(TrainedDrafter):
    """The Drafter around a block head; `backbone` is the module that drafts a block in one pass."""

    session_class: type[BlockSession] = BlockSession

    def __init__(self, target: LoadedModel, head: TrainedHead) -> None:
        super().__init__(target, head)
        self.backbone: TrainedHead = head
        self.eos_ids = target.eos_token_ids
        self.vocab_size = target.facts.vocab_size

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> BlockSession:
        return self.session_class(self, prompt, prompt_hidden)
