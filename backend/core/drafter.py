"""The small protocol every draft mechanism implements.

A `Drafter` is built once per target (it may hold models or a global lookup table shared across
requests). For each sequence being decoded the engine opens a `DraftSession` with the prompt ids;
the session then alternates:

  propose(request) -> Draft     up to `request.max_tokens` token ids, plus the draft distribution q
                                 of each when the mechanism has one (None means deterministic: q is
                                 one-hot on the token, as vLLM treats n-gram drafts); with
                                 `request.max_nodes` > 0 it may propose a token tree instead
                                 (`Draft.parents`, up to max_nodes nodes, depth <= max_tokens);
  observe(outcome)               what the target committed this step (accepted drafts + its own token),
                                 with the target's hidden states at those positions when the drafter
                                 asked for them via `target_hidden_layers`.

A drafter that learns across requests (suffix decoding's global tree of earlier outputs) also
implements `RemembersRequests`: a caller that must compare runs fairly `fork`s it, so each run starts
from the same memory and nothing one run learns reaches another until the caller hands it back
with `learn`.

The protocol is shaped for what later mechanisms need:
  - EAGLE-3 / MTP / DFlash / DSpark read target hidden states: a drafter lists the indices it wants
    in `target_hidden_layers` (HF `output_hidden_states` numbering: 0 = embeddings, L = final,
    normed) and receives them, for committed positions only, in `observe` (prefill included);
  - a confidence head may stop early: return fewer tokens and say why in `Draft.stop_reason`;
  - batches decode one session per row, each observing its own accepted count, so rows may accept
    different numbers of drafts in the same step.

Drafters know nothing about acceptance rules, caches of the target, or timing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from backend.core.verify import SamplingParams


@dataclass(frozen=True)
class DrafterCost:
    """Nominal cost of drafting one token in target-layer equivalents (TLE: the matmul weights of one
    target decoder layer), and as a fraction of a whole target forward, layers plus LM head (ρ in
    speedup ≈ AL / (1 + ρD)). The engine measures the real ρ from timings; this is the paper-and-pencil figure."""

    tle_per_token: float
    target_tle_per_forward: float

    @property
    def nominal_rho(self) -> float:
        return self.tle_per_token / self.target_tle_per_forward

    def to_dict(self) -> dict:
        return {
            "tle_per_token": round(self.tle_per_token, 3),
            "target_tle_per_forward": round(self.target_tle_per_forward, 3),
            "nominal_rho": round(self.nominal_rho, 4),
        }


@dataclass
class DraftRequest:
    tokens: list[int]  # the committed sequence: prompt + output so far (the last one is the newest)
    max_tokens: int  # propose at most this many (D for this step); may be 0
    sampling: SamplingParams  # draft with the target's settings so q is comparable to p
    generator: torch.Generator  # the request's random stream, for drafters that sample
    # trees (tree.py): at most this many nodes (0 = propose a chain), max_tokens capping the depth,
    # at most `branching` children per node; a drafter without a tree builder proposes a chain
    max_nodes: int = 0
    branching: int = 1
    # a chain stops before the first token whose running product of the drafter's confidences falls
    # below this (0: never); a drafter may stop there itself to save draft passes, the engine cuts any draft
    min_confidence: float = 0.0


@dataclass
class Draft:
    tokens: list[int]
    probs: torch.Tensor | None = None  # [len(tokens), V] the distribution each token was drawn from
    # the drafter's confidence at each position, which the confidence stop reads: the greedy token's probability,
    # or when sampling q's top probability, never the drawn token's own (whether a sampled draft is kept must not
    # depend on the token drawn there, or the output leaves the target's distribution)
    confidence: list[float] | None = None
    stop_reason: str | None = None  # why fewer than max_tokens: "no-match", "low-confidence", ...
    # a short label of how strong the drafter's evidence was (e.g. "n3": a 3-token match); the auto
    # draft-length policy learns how often drafts with each label are accepted
    evidence: str | None = None
    # a tree: the parent of each token (-1 = the newest committed token), parents before children,
    # best first (tree.py); None is a chain. probs is then None (q one-hot on each node)
    parents: list[int] | None = None

    def within_confidence(self, threshold: float) -> Draft:
        """This chain cut before its first token whose running product of confidences is below `threshold`
        ("low-confidence"); itself when nothing is cut, it is a tree, or it carries no confidences."""
        if self.parents is not None or self.confidence is None:
            return self
        keep = confident_length(self.confidence, threshold)
        if keep == len(self.tokens):
            return self
        probs = self.probs[:keep] if self.probs is not None else None
        return Draft(self.tokens[:keep], probs, self.confidence[:keep], "low-confidence", self.evidence)


def confident_length(confidence: list[float], threshold: float) -> int:
    """How many leading drafts keep the running product of their probabilities at or above `threshold`: with
    calibrated probabilities, the chance that the target accepts every one of them. Stopping there only
    shortens a draft, so it keeps verification exact (as Hugging Face's `assistant_confidence_threshold`,
    which tests each token's own probability, and DSpark's confidence head, which tests a learned product)."""
    if threshold <= 0:
        return len(confidence)  # no stop: every step asks, so answer without the loop
    survival = 1.0
    for kept, probability in enumerate(confidence):
        survival *= probability
        if survival < threshold:
            return kept
    return len(confidence)


@dataclass
class StepOutcome:
    committed: list[int]  # tokens appended this step: the accepted drafts then the target's token
    accepted: int  # how many of the proposed tokens were kept
    # per requested layer, [len(committed), hidden]: row i is the target's state at the position
    # whose next token is committed[i] (the state that predicted it)
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)


class DraftSession(Protocol):
    def propose(self, request: DraftRequest) -> Draft: ...

    def observe(self, outcome: StepOutcome) -> None: ...

    def close(self) -> None:
        """The sequence ended (finished or cancelled): release per-sequence state."""
        ...


class Drafter(Protocol):
    name: str
    # hidden-state indices wanted from the target's passes; () for drafters that read token ids only
    target_hidden_layers: tuple[int, ...]
    # True when proposing costs next to nothing (table lookups): the engine may then ask for a draft
    # it will not verify, to keep learning whether drafting would pay
    free_to_propose: bool

    def cost(self) -> DrafterCost: ...

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> DraftSession:
        """prompt_hidden: per requested layer, [len(prompt) - 1, hidden], row i predicting prompt[i + 1]
        (the state that predicts the first output token arrives with the first step's outcome)."""
        ...


@runtime_checkable
class RemembersRequests(Protocol):
    """A drafter with memory across requests. Its sessions add what they decoded to the memory of
    the drafter that started them when they close."""

    def memory(self) -> dict[str, int]:
        """What it holds now: {"sequences": earlier outputs, "tokens": their total length}."""
        ...

    def fork(self) -> Drafter:
        """A drafter (same settings, shared weights if any) whose memory starts as this one's is now
        and then goes its own way: what its sessions decode stays in it."""
        ...

    def learned(self) -> list[list[int]]:
        """The outputs a fork has added to its memory since it was forked, oldest first."""
        ...

    def learn(self, output: list[int]) -> None:
        """Add one finished output to the memory."""
        ...
