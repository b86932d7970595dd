"""Metrics against a hand-computed run."""

from dataclasses import dataclass, field

import pytest

from backend.core.metrics import AcceptanceCounter, acceptance_stats, geomean, measured_rho, speed_stats, summary


@dataclass
class Step:
    drafted: list[int]
    accepted: int
    emitted: list[int] = field(default_factory=list)
    draft_s: float = 0.0
    verify_s: float = 0.1


# Four drafting steps with D = 3 and one plain step:
#   accepted 3 (all), 0, 1, 2; plain step accepted nothing (it drafted nothing)
STEPS = [
    Step([1, 2, 3], 3, [1, 2, 3, 9], draft_s=0.03, verify_s=0.2),
    Step([1, 2, 3], 0, [7], draft_s=0.03, verify_s=0.2),
    Step([1, 2, 3], 1, [1, 8], draft_s=0.03, verify_s=0.2),
    Step([1, 2, 3], 2, [1, 2, 8], draft_s=0.03, verify_s=0.2),
    Step([], 0, [5], draft_s=0.0, verify_s=0.1),
]


def test_acceptance_against_hand_computation():
    stats = acceptance_stats(STEPS)
    assert stats.drafting_steps == 4
    assert stats.drafted_tokens == 12
    assert stats.accepted_tokens == 6
    assert stats.al == pytest.approx(1 + 6 / 4)  # vLLM: 1 + accepted / drafts = 2.5
    assert stats.acceptance_rate == pytest.approx(6 / 12)
    assert stats.histogram == [1, 1, 1, 1]  # one step each accepting 0, 1, 2, 3
    # survival: position 1 accepted in 3 of 4 steps, position 2 in 2, position 3 in 1
    assert stats.survival == pytest.approx([3 / 4, 2 / 4, 1 / 4])
    # conditional: position 2 reached by 3 steps (accepted >= 1), accepted by 2; position 3: 2 -> 1
    assert stats.conditional == pytest.approx([3 / 4, 2 / 3, 1 / 2])


def test_conditional_is_none_for_a_position_never_reached():
    stats = acceptance_stats([Step([4, 4], 0, [3])])
    assert stats.conditional == [0.0, None]
    assert stats.survival == [0.0, 0.0]


def test_no_drafting_gives_al_one():
    stats = acceptance_stats([Step([], 0, [1]), Step([], 0, [2])])
    assert (stats.al, stats.acceptance_rate, stats.histogram) == (1.0, 0.0, [0])


def test_the_counter_merges_and_counts_like_acceptance_stats():
    steps = [Step([1] * n, a) for n, a in [(3, 3), (3, 0), (0, 0), (2, 1), (4, 2)]]
    whole = AcceptanceCounter()
    for step in steps:
        whole.add_step(step)
    halves = AcceptanceCounter()
    for part in (steps[:2], steps[2:]):
        half = AcceptanceCounter()
        for step in part:
            half.add_step(step)
        halves.merge(half)
    assert halves == whole and whole.stats() == acceptance_stats(steps)
    assert (whole.drafts, whole.drafted_tokens, whole.accepted_tokens) == (4, 12, 6)
    assert whole.accepted_per_position == [3, 2, 1, 0] and whole.reached_per_position == [4, 3, 2, 0]


def test_speed_and_rho():
    speed = speed_stats(STEPS)
    assert speed.new_tokens == 4 + 1 + 2 + 3 + 1
    assert speed.target_forwards == 5
    assert speed.decode_s == pytest.approx(0.12 + 0.9)
    assert speed.tokens_per_s == pytest.approx(11 / 1.02)
    # rho: 0.12 s drafting over 12 drafted tokens = 0.01 s per token; one plain forward took 0.1 s
    assert measured_rho(STEPS) == pytest.approx(0.1)
    assert summary(STEPS)["al"] == pytest.approx(2.5)


def test_geomean():
    assert geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert geomean([]) == 0.0
