"""The acceptance maths of speculative decoding, as pure functions on tensors.

Notation (Leviathan et al. 2023, Chen et al. 2023): the target scored `[x, d_1 .. d_D]` in one pass,
giving distributions p_0 .. p_D, where p_{i-1} is the target's distribution for the slot d_i fills
and p_D the one after the last draft. q_i is the draft's distribution when it proposed d_i.

Both rules keep the output distribution exactly the target's: greedy acceptance reproduces greedy
decoding token for token, and rejection sampling reproduces sampling from p.

This module knows nothing about models, caches or drafters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.core.errors import SpecScopeError


@dataclass(frozen=True)
class SamplingParams:
    """How the target turns logits into the next token. temperature 0 means greedy."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 keeps every token

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise SpecScopeError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise SpecScopeError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise SpecScopeError(f"top_k must be >= 0 (0 = off), got {self.top_k}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Verdict:
    accepted: int  # how many leading drafts the target kept
    token: int  # the target's own token: the bonus when all were kept, else the correction


def target_probs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Logits [n, V] -> probabilities [n, V] after temperature, top-k and top-p (the same processing
    plain sampling uses, so both paths sample from one distribution). Greedy gives one-hot argmax."""
    logits = logits.float()
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.shape[-1]).float()
    logits = logits / params.temperature
    if 0 < params.top_k < logits.shape[-1]:
        kth_best = torch.topk(logits, params.top_k, dim=-1).values[..., -1:]  # [n, 1]
        logits = logits.masked_fill(logits < kth_best, float("-inf"))
    probs = torch.softmax(logits, dim=-1)  # [n, V]
    if params.top_p < 1:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # [n, V]: mass of strictly better tokens
        sorted_probs = sorted_probs.masked_fill(mass_before >= params.top_p, 0.0)  # keeps the top token always
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


def greedy_verify(target_logits: torch.Tensor, drafted: torch.Tensor) -> Verdict:
    """Keep drafts while each equals the target's argmax; then emit the target's argmax.

    a = max{k : d_i = argmax p_{i-1} for all i <= k};   token = argmax p_a
    target_logits: [D+1, V]; drafted: [D] long.
    """
    best = target_logits.argmax(dim=-1)  # [D+1]
    matches = (drafted == best[: drafted.shape[0]]).int()  # [D]
    accepted = int(matches.cumprod(dim=0).sum())
    return Verdict(accepted, int(best[accepted]))


def replay_verify(reference: list[int], drafted: list[int]) -> Verdict:
    """Replay against a fixed target rollout (to compare drafters on identical text): keep drafts
    while they equal the rollout; the target's token is the rollout's next one.

    a = max{k : d_i = y_i for all i <= k};   token = y_{a+1}      (y = the rollout from here on)
    """
    accepted = 0
    while accepted < len(drafted) and drafted[accepted] == reference[accepted]:
        accepted += 1
    return Verdict(accepted, reference[accepted])


def rejection_verify(
    probs: torch.Tensor,
    drafted: torch.Tensor,
    draft_probs: torch.Tensor | None,
    generator: torch.Generator,
) -> Verdict:
    """Speculative sampling: accept d_i with probability min(1, p(d_i) / q(d_i)); at the first
    rejection sample the correction from the residual norm(max(0, p - q)); if every draft is
    accepted sample the bonus from p_D.

    probs: [D+1, V] target distributions; drafted: [D] long; draft_probs: [D, V], or None for a
    deterministic drafter, whose q is one-hot on d_i (accept with probability p(d_i), residual = p
    with d_i removed).
    """
    num_drafts = drafted.shape[0]
    if draft_probs is None:
        draft_probs = torch.nn.functional.one_hot(drafted, probs.shape[-1]).to(probs.dtype)  # [D, V]
    rows = torch.arange(num_drafts, device=drafted.device)
    p_of_draft = probs[rows, drafted]  # [D]
    q_of_draft = draft_probs[rows, drafted]  # [D]
    uniforms = torch.rand(num_drafts, generator=generator, device=generator.device).to(probs.device)
    for i in range(num_drafts):
        # accept iff u < p/q, i.e. u * q < p (no division: q may be tiny)
        if not uniforms[i] * q_of_draft[i] < p_of_draft[i]:
            residual = torch.clamp(probs[i] - draft_probs[i], min=0.0)  # [V]
            if residual.sum() <= 0:  # p == q exactly, so a rejection had probability 0; fall back to p
                residual = probs[i]
            return Verdict(i, sample(residual, generator))
    return Verdict(num_drafts, sample(probs[num_drafts], generator))


def sample(weights: torch.Tensor, generator: torch.Generator) -> int:
    """One draw from unnormalised non-negative weights [V]."""
    return int(torch.multinomial(weights.to(generator.device), 1, generator=generator))
