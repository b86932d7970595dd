"""Acceptance and speed metrics over a run's steps, with vLLM's definitions so numbers compare.

    AL (mean acceptance length) = 1 + accepted drafts / drafting steps        (bonus token included)
    acceptance rate             = accepted drafts / drafted tokens
    survival at position k      = steps whose first k drafts were all accepted / drafting steps
                                  (vLLM's "per-position acceptance rate", unconditional)
    conditional at position k   = P(accept draft k | drafts 1..k-1 accepted)
                                  = accepted at k / steps that drafted k and accepted 1..k-1
    histogram[j]                = drafting steps that accepted exactly j drafts (bonus excluded)

A "drafting step" is a step that verified at least one draft; plain steps (D = 0, or a drafter with
nothing to propose) are left out of the acceptance figures, as vLLM counts only drafts. Speed figures
count every step. Every acceptance figure comes from one `AcceptanceCounter` (vLLM's spec-decode
counts: drafts, drafted tokens, accepted tokens, accepted per position), fed step by step or from the
store's SQL sums; the store's tests hold the SQL to the same figures. This module knows nothing about
models; it reads plain step records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from math import exp, log
from typing import Protocol

from backend.core.tree_shape import depths, has_tree


class StepLike(Protocol):
    drafted: list[int]
    accepted: int
    emitted: list[int]
    draft_s: float
    verify_s: float


def acceptance_length(accepted_tokens, drafts):
    """AL = 1 + accepted drafts / drafting steps (vLLM's mean acceptance length, bonus token included).
    The one place AL is computed; it also takes numpy arrays (of positive drafts), as the bootstrap does."""
    return 1.0 + accepted_tokens / drafts


@dataclass(frozen=True)
class AcceptanceStats:
    drafting_steps: int
    drafted_tokens: int
    accepted_tokens: int
    histogram: list[int]  # index j: drafting steps accepting exactly j drafts
    survival: list[float]  # index k-1: P(first k drafts accepted), over drafting steps
    conditional: list[float | None]  # index k-1: P(draft k accepted | 1..k-1 accepted); None if never reached

    @property
    def al(self) -> float:
        return acceptance_length(self.accepted_tokens, self.drafting_steps) if self.drafting_steps else 1.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    def to_dict(self) -> dict:
        return {
            "al": self.al,
            "acceptance_rate": self.acceptance_rate,
            "drafting_steps": self.drafting_steps,
            "drafted_tokens": self.drafted_tokens,
            "accepted_tokens": self.accepted_tokens,
            "histogram": self.histogram,
            "survival": self.survival,
            "conditional": self.conditional,
        }


def _grow(counts: list[int], size: int) -> None:
    counts.extend([0] * (size - len(counts)))


def tree_depth(parents: Sequence[int] | None) -> int | None:
    """A tree step's depth from its parents (a list, or an array as a store frame holds it); None for
    a chain step (no parents: None, or a frame's missing value)."""
    return max(depths(list(parents))) if has_tree(parents) else None


@dataclass
class AcceptanceCounter:
    """Acceptance counts in the style of vLLM's SpecDecodingStats: fed one step at a time (`add`), or
    built from counts already summed elsewhere (the store's SQL), merged with `merge`, and turned into
    figures by `stats()`. Index k of the per-position lists is draft position k + 1; for a token tree
    the positions are its depths (its kept path accepted positions 1..a) while `drafted_tokens` counts
    every node verified."""

    drafts: int = 0  # drafting steps (steps that verified at least one draft)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_position: list[int] = field(default_factory=list)  # steps that accepted position k
    reached_per_position: list[int] = field(default_factory=list)  # steps that drafted k, accepted 1..k-1
    histogram: list[int] = field(default_factory=list)  # index j: drafting steps accepting exactly j

    def add(self, drafted: int, accepted: int, positions: int | None = None) -> None:
        """Count one step that drafted `drafted` tokens and accepted the first `accepted` of them; a
        tree step drafted `drafted` nodes over `positions` depths."""
        if drafted == 0:
            return
        positions = drafted if positions is None else positions
        self.drafts += 1
        self.drafted_tokens += drafted
        self.accepted_tokens += accepted
        self._fit(positions)
        self.histogram[accepted] += 1
        for k in range(min(positions, accepted + 1)):
            self.reached_per_position[k] += 1
            self.accepted_per_position[k] += k < accepted

    def add_step(self, step: StepLike) -> None:
        self.add(len(step.drafted), step.accepted, tree_depth(getattr(step, "parents", None)))

    def merge(self, other: AcceptanceCounter) -> AcceptanceCounter:
        """Add another counter's counts to this one (returns self)."""
        self.drafts += other.drafts
        self.drafted_tokens += other.drafted_tokens
        self.accepted_tokens += other.accepted_tokens
        self._fit(len(other.reached_per_position))
        pairs = (
            (self.accepted_per_position, other.accepted_per_position),
            (self.reached_per_position, other.reached_per_position),
            (self.histogram, other.histogram),
        )
        for mine, theirs in pairs:
            _grow(mine, len(theirs))
            for k, count in enumerate(theirs):
                mine[k] += count
        return self

    def _fit(self, positions: int) -> None:
        """Room for `positions` draft positions (and a histogram of 0..positions accepted)."""
        _grow(self.accepted_per_position, positions)
        _grow(self.reached_per_position, positions)
        _grow(self.histogram, len(self.reached_per_position) + 1)

    def stats(self) -> AcceptanceStats:
        positions = len(self.reached_per_position)
        histogram = self.histogram + [0] * (positions + 1 - len(self.histogram))
        return AcceptanceStats(
            drafting_steps=self.drafts,
            drafted_tokens=self.drafted_tokens,
            accepted_tokens=self.accepted_tokens,
            histogram=histogram,
            survival=[accepted / self.drafts for accepted in self.accepted_per_position] if self.drafts else [],
            conditional=[
                accepted / reached if reached else None
                for accepted, reached in zip(self.accepted_per_position, self.reached_per_position, strict=True)
            ],
        )


def count_acceptance(steps: Sequence[StepLike]) -> AcceptanceCounter:
    counter = AcceptanceCounter()
    for step in steps:
        counter.add_step(step)
    return counter


def acceptance_stats(steps: Sequence[StepLike]) -> AcceptanceStats:
    return count_acceptance(steps).stats()


@dataclass(frozen=True)
class SpeedStats:
    new_tokens: int
    target_forwards: int  # one per step: each step is one verification pass
    decode_s: float  # drafting + verification time over all steps (prefill excluded)
    draft_s: float
    verify_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.decode_s if self.decode_s > 0 else 0.0

    @property
    def draft_overhead(self) -> float:
        """Drafting time as a fraction of verification time."""
        return self.draft_s / self.verify_s if self.verify_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {
            "new_tokens": self.new_tokens,
            "target_forwards": self.target_forwards,
            "decode_s": self.decode_s,
            "draft_s": self.draft_s,
            "verify_s": self.verify_s,
            "tokens_per_s": self.tokens_per_s,
            "draft_overhead": self.draft_overhead,
        }


def speed_stats(steps: Sequence[StepLike]) -> SpeedStats:
    draft_s = sum(s.draft_s for s in steps)
    verify_s = sum(s.verify_s for s in steps)
    return SpeedStats(
        new_tokens=sum(len(s.emitted) for s in steps),
        target_forwards=len(steps),
        decode_s=draft_s + verify_s,
        draft_s=draft_s,
        verify_s=verify_s,
    )


def measured_rho(steps: Sequence[StepLike]) -> float | None:
    """ρ measured: drafting time per drafted token over the time of one plain target step.

    A plain step (nothing drafted) is one target forward on one token; when the run has none, the
    drafting steps' verification time stands in (an upper bound on one forward)."""
    drafting = [s for s in steps if s.drafted]
    if not drafting:
        return None
    plain = [s.verify_s for s in steps if not s.drafted]
    forward_s = sum(plain) / len(plain) if plain else sum(s.verify_s for s in drafting) / len(drafting)
    per_token = sum(s.draft_s for s in drafting) / sum(len(s.drafted) for s in drafting)
    return per_token / forward_s if forward_s > 0 else None


def speedup(tokens_per_s: float, baseline_tokens_per_s: float) -> float:
    return tokens_per_s / baseline_tokens_per_s if baseline_tokens_per_s > 0 else 0.0


def geomean(values: Sequence[float]) -> float:
    """Geometric mean of positive values (speedups); 0.0 for none."""
    return exp(sum(log(v) for v in values) / len(values)) if values else 0.0


def summary(steps: Sequence[StepLike]) -> dict:
    """The flat summary the CLI and the worker print: acceptance, speed and ρ of one run."""
    acceptance, speed = acceptance_stats(steps), speed_stats(steps)
    return {**speed.to_dict(), **acceptance.to_dict(), "rho": measured_rho(steps)}
