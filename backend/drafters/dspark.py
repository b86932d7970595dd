"""DSpark: the DFlash block drafter plus a sequential Markov head and a confidence head (DeepSpec's
DSpark).

DFlash drafts every slot of a block independently, so a block can say "of of the the". DSpark keeps
DFlash's one parallel pass (the backbone, imported from dflash.py) and then walks the block left to
right with two cheap heads that see the previously drafted token x_{k-1} (the anchor for slot 1):

    z_k       = W_1 e(x_{k-1})                    e = the target's frozen embedding; W_1: H -> r
    logits_k  = U_k + W_2 z_k                     U_k = the backbone's logits for slot k; W_2: r -> Vd
    c_k       = sigmoid(w^T [h_k ; z_k] + b)      the chance that slot k is accepted, given its prefix was
    stop before slot k when  prod_{i<=k} c_i < threshold                    ("low-confidence")

The Markov step costs r (H + Vd) multiply-adds per drafted token. W_2 starts at zero (an untrained
DSpark drafts exactly as its backbone) and the confidence bias starts high (it drafts whole blocks).
Each token is drawn from its Markov-corrected distribution with the target's sampling settings, so q
is exact for rejection sampling; stopping on confidence only shortens the draft, which keeps it lossless.
Asked for a token tree, each node's children are the top tokens of its own corrected distribution and the
confidence threshold prunes per path (DSparkSession.draft_tree).

Training: backbone KL + Markov-corrected KL (teacher-forced on the true previous tokens) + BCE of the
confidence against "the corrected draft's argmax equals the target's" at each slot (given a correct
prefix). Anchored blocks and the session are block_drafting.py's. Knows nothing about the engine or the
training loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from backend.core.drafter import Draft, DrafterCost, DraftRequest
from backend.core.models import LoadedModel, matmul_weights
from backend.drafters import dflash, head_io
from backend.drafters.block_drafting import (
    BlockDrafter,
    BlockSession,
    anchored_blocks,
    block_kl,
    expected_accepted,
    position_weights,
    top1_by_position,
    tree_stop_reason,
)
from backend.drafters.dflash import DFlashConfig, DFlashHead
from backend.drafters.spec import trained_spec
from backend.drafters.trained import TargetParts, TrainBatch, TrainedHead, pick_tokens
from backend.drafters.tree_growth import Children, grow, top_children

KIND = "dspark"
FEATURE_NOISE = False  # not a FeatureHead: train --feature-noise is refused
INITIAL_CONFIDENCE_LOGIT = 4.0  # sigmoid(4) = 0.98: an untrained head drafts whole blocks


@dataclass(frozen=True)
class DSparkConfig(DFlashConfig):
    kind: ClassVar[str] = KIND
    markov_rank: int = 64  # r of the Markov head
    threshold: float = 0.3  # stop where the running product of confidences falls below this (0 = never)


class DSparkHead(TrainedHead):
    kind = KIND
    config_class = DSparkConfig

    def __init__(self, parts: TargetParts, config: DSparkConfig, d2t: torch.Tensor) -> None:
        super().__init__(parts, config, d2t)
        self.backbone = DFlashHead(parts, config, d2t)
        hidden, rank = parts.hidden_size, config.markov_rank
        self.markov_in = nn.Linear(hidden, rank, bias=False)  # W_1
        self.markov_out = nn.Linear(rank, d2t.numel(), bias=False)  # W_2
        self.confidence = nn.Linear(hidden + rank, 1)
        with torch.no_grad():
            self.markov_out.weight.zero_()
            self.confidence.weight.zero_()
            self.confidence.bias.fill_(INITIAL_CONFIDENCE_LOGIT)

    upgrade_state = DFlashHead.upgrade_state  # its backbone's layers were renamed too

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.backbone.feature_layers

    def markov(self, previous: torch.Tensor) -> torch.Tensor:
        """Previous token ids [...] (target vocabulary) -> z [..., r]."""
        return self.markov_in(self.embed(previous).to(self.markov_in.weight.dtype))

    def corrected(self, logits: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return logits + self.markov_out(z)  # [..., Vd]

    def confidence_logit(self, hidden: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return self.confidence(torch.cat([hidden, z], dim=-1))[..., 0]  # [...]


class DSparkSession(BlockSession):
    """The block session (context bookkeeping, one backbone pass), drafting left to right from the block."""

    def draft(self, hidden: torch.Tensor, anchor: int, request: DraftRequest) -> Draft:
        """hidden [n, H] for slots 1..n -> the draft, stopping at low confidence or after an EOS."""
        head: DSparkHead = self.drafter.head
        base: torch.Tensor | None = None  # [n, Vd]: the backbone's logits, once a first slot passes
        tokens: list[int] = []
        rows: list[torch.Tensor] = []
        confidence: list[float] = []
        previous, survival, stop = anchor, 1.0, None
        for k in range(hidden.shape[0]):
            z = head.markov(torch.tensor([previous], device=hidden.device))  # [1, r]
            survival *= float(torch.sigmoid(head.confidence_logit(hidden[k : k + 1], z)))
            if survival < self.drafter.threshold:
                stop = "low-confidence"
                break
            if base is None:  # a draft that stops before its first slot never reads the LM head
                base = head.backbone.logits(hidden)
            chosen, q, p = pick_tokens(head.corrected(base[k : k + 1], z), head.d2t, self.drafter.vocab_size, request)
            tokens += chosen
            confidence += p
            if q is not None:
                rows.append(q[0])
            previous = chosen[0]
            if previous in self.drafter.eos_ids:
                stop = "eos" if k + 1 < hidden.shape[0] else None
                break
        return Draft(tokens, torch.stack(rows) if rows else None, confidence, stop)

    def draft_tree(self, hidden: torch.Tensor, anchor: int, request: DraftRequest) -> Draft:
        """hidden [n, H] for slots 1..n -> a token tree. A slot's corrected distribution depends on the token
        before it, so each node's children come from its own Markov-corrected distribution (no new backbone
        pass: one Markov step per expanded node). The confidence threshold applies per path: a node's
        children are drafted only while the running product of confidences along its path (each computed
        from its slot's state and its parent's token, as on a chain) stays at or above the threshold; a
        chain stops where a tree prunes that one branch."""
        head: DSparkHead = self.drafter.head
        base: torch.Tensor | None = None  # [n, Vd]: the backbone's logits, once some node passes
        cut = False

        def expand(token: int, depth: int, survival: float) -> Children | None:
            nonlocal base, cut
            z = head.markov(torch.tensor([token], device=hidden.device))  # [1, r]
            survival *= float(torch.sigmoid(head.confidence_logit(hidden[depth : depth + 1], z)))
            if survival < self.drafter.threshold:
                cut = True
                return None
            if base is None:  # a tree cut at its root never reads the LM head
                base = head.backbone.logits(hidden)
            probs = torch.softmax(head.corrected(base[depth : depth + 1], z).float(), dim=-1)  # [1, Vd]
            return top_children(probs, request.branching, head.d2t, survival)[0]

        n = hidden.shape[0]
        tree = grow(anchor, expand, request.max_nodes, n, self.drafter.eos_ids, root_state=1.0)
        low = cut and tree.depth < n
        return tree.draft("low-confidence" if low else tree_stop_reason(tree, n, self.drafter.eos_ids))


class DSparkDrafter(BlockDrafter):
    name = KIND
    head_class = DSparkHead
    session_class = DSparkSession

    def __init__(self, target: LoadedModel, head: DSparkHead, threshold: float | None = None) -> None:
        super().__init__(target, head)
        self.backbone = head.backbone
        self.threshold = head.config.threshold if threshold is None else threshold

    @classmethod
    def load(cls, folder: str | Path, target: LoadedModel, threshold: float | None = None) -> DSparkDrafter:
        return cls(target, head_io.load_head(DSparkHead, folder, target), threshold)

    def cost(self) -> DrafterCost:
        """The backbone pass per block slot, plus the Markov and confidence heads run once per token."""
        head, layer = self.head, self.target.layer_weights
        per_token = (
            matmul_weights(head.markov_in) + matmul_weights(head.markov_out) + matmul_weights(head.confidence)
        ) / layer
        per_pass = matmul_weights(head.backbone) / layer
        return DrafterCost(per_pass / head.config.block_size + per_token, self.target.tle_per_forward)


# --- the trained-kind interface (the training loop's, the same for every kind) ------------------------


def training_layers(target: LoadedModel, settings: dict | None = None) -> tuple[int, ...]:
    """The backbone's: its fused layers and the final state (dflash.training_layers)."""
    return dflash.training_layers(target, settings)


def new_head(
    target: LoadedModel,
    settings: dict | None = None,
    token_counts: torch.Tensor | None = None,
    d2t: torch.Tensor | None = None,
) -> DSparkHead:
    """An untrained head; settings are DSparkConfig fields (DFlash's plus markov_rank and threshold); the
    vocabulary as in head_io.new_head."""
    return head_io.new_head(DSparkHead, target, settings, token_counts, d2t)


def training_loss(
    head: DSparkHead,
    parts: TargetParts,
    batch: TrainBatch,
    block_size: int | None = None,
    anchors_per_row: int = 16,
    decay: float | None = 4.0,
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
) -> tuple[torch.Tensor, dict]:
    """weights: (backbone KL, Markov-corrected KL, confidence BCE). The confidence head reads detached
    states, so it calibrates the drafter without pulling on it."""
    blocks = anchored_blocks(head.backbone, parts, batch, block_size, anchors_per_row)
    w = position_weights(blocks.valid.shape[2], decay, blocks.valid.device)
    base = head.backbone.logits(blocks.hidden)  # [B, K, D, Vd]
    z = head.markov(blocks.previous)  # [B, K, D, r]: teacher-forced on the true previous tokens
    corrected = head.corrected(base, z)  # [B, K, D, Vd]
    backbone_kl, markov_kl = block_kl(base, blocks, w), block_kl(corrected, blocks, w)
    accepted = (corrected.argmax(-1) == blocks.target.argmax(-1)).float()  # [B, K, D]: c*_k
    logit = head.confidence_logit(blocks.hidden.detach(), z.detach())  # [B, K, D]
    valid = blocks.valid.float()
    bce = (F.binary_cross_entropy_with_logits(logit.float(), accepted, reduction="none") * valid).sum()
    bce = bce / valid.sum().clamp(min=1)
    loss = weights[0] * backbone_kl + weights[1] * markov_kl + weights[2] * bce
    top1 = top1_by_position(base, blocks)
    top1_markov = top1_by_position(corrected, blocks)
    return loss, {
        "loss": float(loss.detach()),
        "backbone_kl": float(backbone_kl.detach()),
        "markov_kl": float(markov_kl.detach()),
        "confidence_bce": float(bce.detach()),
        "top1": top1,
        "top1_markov": top1_markov,
        "expected_accepted": expected_accepted(top1_markov),
    }


def drafter(target: LoadedModel, head: DSparkHead) -> DSparkDrafter:
    return DSparkDrafter(target, head)


def save(head: DSparkHead, target: LoadedModel, folder: str | Path) -> Path:
    return head_io.save(head, target, folder)


def load_trained(target: LoadedModel, folder: str | Path) -> tuple[DSparkHead, dict]:
    return head_io.trained_head(DSparkHead, folder, target)


def load(folder: str | Path, target: LoadedModel, threshold: float | None = None) -> DSparkDrafter:
    return DSparkDrafter.load(folder, target, threshold)


SPEC = trained_spec(
    KIND,
    "DSpark: DFlash's block drafter plus a Markov head over the previous draft and a confidence head that "
    "stops the block",
    load,
    lambda target: drafter(target, new_head(target)),
    trees=True,
)
