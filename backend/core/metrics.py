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
count every step. This module knows nothing about models; it reads plain step records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import exp, log
from typing import Protocol


class StepLike(Protocol):
    drafted: list[int]
    accepted: int
    emitted: list[int]
    draft_s: float
    verify_s: float


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
        return 1.0 + self.accepted_tokens / self.drafting_steps if self.drafting_steps else 1.0

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


def acceptance_stats(steps: Sequence[StepLike]) -> AcceptanceStats:
    drafting = [s for s in steps if s.drafted]
    longest = max((len(s.drafted) for s in drafting), default=0)
    histogram = [0] * (longest + 1)
    reached = [0] * longest  # steps that drafted position k and accepted all before it
    accepted_at = [0] * longest  # steps that accepted position k
    for step in drafting:
        histogram[step.accepted] += 1
        for k in range(len(step.drafted)):
            if k > step.accepted:
                break
            reached[k] += 1
            accepted_at[k] += k < step.accepted
    count = len(drafting)
    return AcceptanceStats(
        drafting_steps=count,
        drafted_tokens=sum(len(s.drafted) for s in drafting),
        accepted_tokens=sum(s.accepted for s in drafting),
        histogram=histogram,
        survival=[accepted_at[k] / count for k in range(longest)],
        conditional=[accepted_at[k] / reached[k] if reached[k] else None for k in range(longest)],
    )


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
