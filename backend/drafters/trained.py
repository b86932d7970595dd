"""What the trained drafters (EAGLE-3, MTP, DFlash, DSpark) share at run time: the frozen parts of the
target they borrow, the batch they train on, the base of their heads (config, reduced draft vocabulary
d2t), the target's soft targets over that vocabulary, how a session collects the target's hidden states,
and the one way a draft token is picked from draft logits.

The rule for missing hidden states, the same for every kind: a session that did not receive the states of
every committed position cannot pair positions with features any more, so from then on it proposes
nothing (`Draft([], stop_reason="no-features")`); decoding goes on, one target token per step.

Knows nothing about any one mechanism's layers, the engine, weights folders (head_io.py) or training.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from backend.core.drafter import Draft, DraftRequest
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, matmul_weights
from backend.core.verify import sample, target_probs

NO_FEATURES = "no-features"  # the stop reason of a session that lost the target's hidden states


class DrafterWeightsError(SpecScopeError):
    """A trained drafter's folder is missing, incomplete, or made for another target."""


@dataclass
class TargetParts:
    """The frozen target pieces a trained drafter reuses: token embeddings, final norm and LM head."""

    embed: torch.nn.Embedding  # [V, H]
    norm: torch.nn.Module  # the target's final RMSNorm (its output is hidden state L, HF numbering)
    lm_head: torch.nn.Linear  # [V, H] (tied to embed on SmolLM2)
    num_layers: int
    hidden_size: int
    vocab_size: int
    config: object  # the target's text config (rms_norm_eps, rope settings, head sizes, ...)

    @classmethod
    def of(cls, target: LoadedModel) -> TargetParts:
        model = target.model
        config = model.config.get_text_config(decoder=True)
        return cls(
            model.get_input_embeddings(),
            model.get_decoder().norm,
            model.get_output_embeddings(),
            config.num_hidden_layers,
            config.hidden_size,
            config.vocab_size,
            config,
        )


@dataclass
class TrainBatch:
    """Sequences with the target's hidden states, as the training loop feeds every mechanism.
    Row t of hidden[l] is the target's state at position t (HF `output_hidden_states` numbering:
    0 = embeddings, L = final, normed), i.e. the state that predicts input_ids[:, t + 1]."""

    input_ids: torch.Tensor  # [B, T] long
    loss_mask: torch.Tensor  # [B, T] bool: positions whose NEXT token is a training target (responses)
    hidden: dict[int, torch.Tensor]  # layer -> [B, T, H]


def whole_vocabulary(d2t: torch.Tensor, vocab_size: int) -> bool:
    """Is d2t [Vd] every target token in order (no reduced vocabulary)?"""
    return d2t.numel() == vocab_size and bool((d2t == torch.arange(vocab_size, device=d2t.device)).all())


class TrainedHead(nn.Module):
    """The base of every trained head. The target's parts are borrowed through `parts` (a plain attribute:
    never in state_dict() or parameters()); `d2t` [Vd] maps draft token i to target token d2t[i] (a
    non-persistent buffer: it is saved as the vocabulary map). A kind defines:

        kind, config_class     its name and its config dataclass (for_target(parts, **settings), to_dict())
        feature_layers         the target hidden states it reads (HF numbering)
        logits(h [..., H])     -> [..., Vd]
    and may define `upgrade_state` to read weights saved under older parameter names."""

    kind: str
    config_class: type
    feature_layers: tuple[int, ...]

    def __init__(self, parts: TargetParts, config, d2t: torch.Tensor) -> None:
        if d2t.numel() != config.draft_vocab_size:
            raise SpecScopeError(f"the vocabulary map has {d2t.numel()} tokens, the head {config.draft_vocab_size}")
        super().__init__()
        self.config, self.parts = config, parts
        self.register_buffer("d2t", d2t.to(parts.embed.weight.device, torch.long), persistent=False)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """Token ids [...] -> the target's frozen embeddings [..., H]."""
        with torch.no_grad():
            return self.parts.embed(ids)

    def draft_weights(self) -> int:
        """Matmul weights of one pass (the cost model's numerator)."""
        return matmul_weights(self)

    def hold_frozen_rows_in(self, dtype: torch.dtype) -> None:
        """Move the frozen matmul rows a kind keeps outside its nn.Linear layers to `dtype` for drafting
        (head_precision.py); a kind without any has nothing to do."""

    @classmethod
    def upgrade_state(cls, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return state


@torch.no_grad()
def teacher_logits(parts: TargetParts, final: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
    """The target's next-token logits read from its cached final states: lm_head(hs_L), over every token or the
    vocabulary `rows` only. final [..., H] -> [..., V or len(rows)] fp32. Computed in the LM head's own dtype even
    under mixed-precision training: the teacher signal is never rounded to bf16."""
    weight, bias = parts.lm_head.weight.detach(), parts.lm_head.bias
    if rows is not None:
        weight, bias = weight[rows], bias[rows] if bias is not None else None  # [Vd, H]
    with torch.autocast(final.device.type, enabled=False):
        return F.linear(final.to(weight.dtype), weight, bias).float()


def target_distribution(parts: TargetParts, final: torch.Tensor, d2t: torch.Tensor) -> torch.Tensor:
    """The soft targets: the target's next-token distribution restricted to the draft vocabulary,
    p = softmax(lm_head(hs_L)[d2t]). final [..., H] (hidden state L) -> [..., Vd] fp32."""
    return torch.softmax(teacher_logits(parts, final, d2t), dim=-1)


class CommittedStates:
    """The target hidden states a session has received, position by position, until a drafter consumes
    them. `blind` once some committed positions arrived without them (see the module's rule)."""

    def __init__(self, layers: tuple[int, ...]) -> None:
        self.layers = layers
        self.received = 0  # positions whose states arrived (consumed or pending)
        self.pending: list[dict[int, torch.Tensor]] = []  # layer -> [n, H], in order
        self.blind = False

    def receive(self, hidden: dict[int, torch.Tensor], rows: int) -> None:
        """The states of `rows` newly committed positions (a one-token prompt has none)."""
        if rows == 0:
            return
        if not all(layer in hidden for layer in self.layers) or hidden[self.layers[0]].shape[0] != rows:
            self.blind = True
            return
        self.pending.append({layer: hidden[layer] for layer in self.layers})
        self.received += rows

    def ready(self, positions: int) -> bool:
        """Have the states of exactly the first `positions` positions arrived, with none lost?"""
        return not self.blind and self.received == positions

    def take(self) -> dict[int, torch.Tensor] | None:
        """The pending states, layer -> [n, H], and forget them; None when none are pending."""
        if not self.pending:
            return None
        rows = {layer: torch.cat([states[layer] for states in self.pending]) for layer in self.layers}
        self.pending = []
        return rows


def pick_tokens(
    logits: torch.Tensor, d2t: torch.Tensor, vocab_size: int, request: DraftRequest
) -> tuple[list[int], torch.Tensor | None, list[float]]:
    """Draft logits [n, Vd] -> target token ids, q [n, V] (None when greedy: one-hot) and each position's
    confidence (Draft.confidence: the greedy token's probability, or q's top probability when sampling).
    Sampling processes the logits with the target's own settings (temperature, top-k, top-p) over the draft
    vocabulary and draws there; q is that distribution placed at d2t, zero elsewhere, so rejection sampling
    stays exact."""
    if request.sampling.greedy:
        chosen = logits.argmax(dim=-1)  # [n]
        probs = torch.softmax(logits.float(), dim=-1).gather(1, chosen[:, None])[:, 0]  # [n]
        return d2t[chosen].tolist(), None, probs.tolist()
    q = target_probs(logits, request.sampling)  # [n, Vd]
    chosen = torch.tensor([sample(row, request.generator) for row in q], device=q.device)  # [n]
    full = q.new_zeros(q.shape[0], vocab_size).index_copy_(1, d2t, q)  # [n, V]
    return d2t[chosen].tolist(), full, q.max(dim=-1).values.tolist()


def cut_after_eos(
    tokens: list[int], probs: torch.Tensor | None, confidence: list[float], eos_ids: set[int], wanted: int
) -> Draft:
    """A draft of `tokens` that ends at its first end-of-sequence ("eos" when that cut it short of `wanted`)."""
    end = next((i + 1 for i, token in enumerate(tokens) if token in eos_ids), len(tokens))
    stop = "eos" if end < wanted and tokens[end - 1] in eos_ids else None
    return Draft(tokens[:end], probs[:end] if probs is not None else None, confidence[:end], stop)
