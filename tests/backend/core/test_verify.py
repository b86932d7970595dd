"""The acceptance rules: hand-worked greedy cases, the rejection-sampling law checked exactly, the
vectorised rule against a one-draft-at-a-time loop, and the `verify` entry point's choice of rule."""

import pytest
import torch
from scipy.stats import chisquare

from backend.core.errors import SpecScopeError
from backend.core.verify import (
    SamplingParams,
    Verdict,
    draw,
    greedy_verify,
    rejection_verify,
    replay_verify,
    target_probs,
    verify,
)


def logits_with_argmax(best: list[int], vocab: int = 6) -> torch.Tensor:
    logits = torch.zeros(len(best), vocab)
    logits[torch.arange(len(best)), torch.tensor(best)] = 5.0
    return logits


@pytest.mark.parametrize(
    ("target_best", "drafted", "accepted", "token"),
    [
        ([3, 4, 5, 1], [3, 4, 5], 3, 1),  # all accepted: the bonus is the argmax after the last draft
        ([3, 4, 5, 1], [3, 2, 5], 1, 4),  # second draft wrong: correction is the target's choice there
        ([3, 4, 5, 1], [0, 4, 5], 0, 3),  # later matches do not count after a mismatch
        ([2], [], 0, 2),  # no drafts: a plain decoding step
    ],
)
def test_greedy_verify_keeps_the_matching_prefix(target_best, drafted, accepted, token):
    verdict = greedy_verify(logits_with_argmax(target_best), torch.tensor(drafted, dtype=torch.long))
    assert (verdict.accepted, verdict.token) == (accepted, token)


def test_target_probs_temperature_top_k_top_p():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.allclose(target_probs(logits, SamplingParams(1.0)), torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = target_probs(logits, SamplingParams(1.0, top_k=2))
    assert torch.allclose(top2, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    # top-p 0.75: the smallest set holding 0.75 of the mass -> 0.5 and 0.3 kept, 0.15 and 0.05 dropped
    nucleus = target_probs(logits, SamplingParams(1.0, top_p=0.75))
    assert torch.allclose(nucleus, torch.tensor([[0.625, 0.375, 0.0, 0.0]]))
    sharp = target_probs(logits, SamplingParams(0.5))  # p^(1/T) renormalised
    expected = torch.tensor([0.25, 0.09, 0.0225, 0.0025])
    assert torch.allclose(sharp, (expected / expected.sum())[None], atol=1e-6)
    assert torch.equal(target_probs(logits, SamplingParams(0.0)), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))


@pytest.mark.parametrize("bad", [{"temperature": -0.1}, {"top_p": 0.0}, {"top_p": 1.5}, {"top_k": -1}])
def test_sampling_params_reject_bad_values(bad):
    with pytest.raises(SpecScopeError):
        SamplingParams(**bad)


def test_rejection_with_equal_p_and_q_always_accepts():
    generator = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(4, 10, generator=generator), dim=-1)
    drafted = torch.tensor([1, 2, 3])
    for _ in range(50):
        assert rejection_verify(p, drafted, p[:3].clone(), generator).accepted == 3


def test_rejection_of_impossible_draft_never_emits_it():
    generator = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    for _ in range(200):
        verdict = rejection_verify(p, torch.tensor([0]), None, generator)
        assert verdict.accepted == 0 and verdict.token in (1, 2)


# one draft per step: d ~ Q, the target's distribution for its slot P0 and for the slot after it P1
P0 = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
Q = torch.tensor([0.05, 0.10, 0.40, 0.05, 0.30, 0.10])
P1 = torch.tensor([0.05, 0.05, 0.10, 0.20, 0.25, 0.35])
LAW_DRAWS = 20_000


def first_and_bonus_counts(probs: torch.Tensor, one_hot_draft: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Over LAW_DRAWS one-draft steps with d ~ Q and the target's rows `probs` ([2, V]): counts of the
    first emitted token (d if accepted, else the correction) and of the bonus token of accepted steps."""
    generator = torch.Generator().manual_seed(1)
    first, bonus = torch.zeros(6), torch.zeros(6)
    for _ in range(LAW_DRAWS):
        draft = int(torch.multinomial(Q, 1, generator=generator))
        verdict = rejection_verify(probs, torch.tensor([draft]), None if one_hot_draft else Q[None], generator)
        first[draft if verdict.accepted else verdict.token] += 1
        bonus[verdict.token] += verdict.accepted
    return first, bonus


def fit(counts: torch.Tensor, probs: torch.Tensor) -> float:
    """Chi-square p-value of `counts` against the distribution `probs`."""
    expected = probs.double() / probs.double().sum() * counts.sum().double()
    return float(chisquare(counts.double().numpy(), expected.numpy()).pvalue)


@pytest.mark.parametrize("one_hot_draft", [False, True])
def test_the_first_token_follows_the_target_and_the_bonus_the_next_row(one_hot_draft):
    """Leviathan et al. Theorem 1: with d ~ q and the rule, the emitted token is distributed as p_0; after
    an accepted draft the bonus comes from p_1. Chi-square tests at significance 0.001."""
    first, bonus = first_and_bonus_counts(torch.stack([P0, P1]), one_hot_draft)
    assert bonus.sum() > 2000  # enough accepted steps to test the bonus
    assert fit(first, P0) > 0.001 and fit(bonus, P1) > 0.001


def test_the_same_checks_catch_the_rule_fed_the_wrong_rows():
    """Power check through the same code: a rule that reads q as the target's row accepts every draft and
    emits q; one that draws the bonus from the draft's own row emits p_0 there. Both are rejected."""
    first, _ = first_and_bonus_counts(torch.stack([Q, P1]), one_hot_draft=False)
    assert fit(first, P0) < 1e-6
    _, bonus = first_and_bonus_counts(torch.stack([P0, P0]), one_hot_draft=False)
    assert fit(bonus, P1) < 1e-6


def rejection_loop(probs, drafted, draft_probs, generator) -> tuple[int, int]:
    """The textbook rule, one draft at a time (Leviathan et al. Algorithm 1), on the same draws: D
    uniforms, then one draw of the correction or the bonus."""
    uniforms = torch.rand(len(drafted), generator=generator)
    for i, token in enumerate(drafted.tolist()):
        q = draft_probs[i] if draft_probs is not None else torch.nn.functional.one_hot(drafted[i], probs.shape[-1])
        if not uniforms[i] < probs[i, token] / q[token]:
            residual = torch.clamp(probs[i] - q, min=0.0)
            if residual.sum() <= 0:
                residual = probs[i]
            return i, int(draw(residual, generator))
    return len(drafted), int(draw(probs[len(drafted)], generator))


@pytest.mark.parametrize("one_hot_draft", [False, True])
def test_vectorised_rejection_equals_the_loop_under_the_same_draws(one_hot_draft):
    """Same accepted count and token as the loop for seeded draws, over D = 1..8, drafts sampled from
    q (so both acceptances and rejections occur) and targets that rule some tokens out."""
    cases = torch.Generator().manual_seed(3)
    seen_accepted, seen_bonus = set(), set()
    for case in range(200):
        num_drafts, vocab = 1 + case % 8, 5 + case % 7
        sharpness = 6.0 if case % 2 else 2.0  # sharp targets with a close q accept long runs
        probs = torch.softmax(sharpness * torch.randn(num_drafts + 1, vocab, generator=cases), dim=-1)  # [D+1, V]
        if case % 3 == 0:
            probs[:, :2] = 0.0
            probs = probs / probs.sum(dim=-1, keepdim=True)
        draft_probs = torch.softmax(2 * torch.randn(num_drafts, vocab, generator=cases), dim=-1)  # [D, V]
        if case % 2:
            draft_probs = 0.9 * probs[:num_drafts] + 0.1 * draft_probs
        drafted = torch.multinomial(draft_probs, 1, generator=cases)[:, 0]  # [D]
        q = None if one_hot_draft else draft_probs
        loop_rng, vector_rng = torch.Generator().manual_seed(case), torch.Generator().manual_seed(case)
        expected = rejection_loop(probs, drafted, q, loop_rng)
        verdict = rejection_verify(probs, drafted, q, vector_rng)
        assert (verdict.accepted, verdict.token) == expected, case
        assert torch.equal(loop_rng.get_state(), vector_rng.get_state())  # the same random numbers consumed
        seen_accepted.add(verdict.accepted)
        seen_bonus.add(verdict.accepted == num_drafts)
    assert seen_bonus == {False, True} and len(seen_accepted) >= 6  # corrections and bonuses, short and long runs


def test_draw_follows_the_weights_and_never_draws_a_zero_weight():
    generator = torch.Generator().manual_seed(2)
    for weights in ([0.0, 0.0, 3.0], [2.0, 0.0, 0.0], [0.0, 1e-30, 0.0, 0.0]):
        assert {int(draw(torch.tensor(weights), generator)) for _ in range(50)} == {weights.index(max(weights))}
    weights = torch.tensor([4.0, 0.0, 3.0, 2.0, 1.0])
    counts = torch.bincount(torch.cat([draw(weights, generator) for _ in range(10_000)]), minlength=5)  # [5]
    drawable = weights > 0
    assert counts[1] == 0 and chisquare(counts[drawable].numpy(), (weights[drawable] * 1000).numpy()).pvalue > 0.001


def test_rejection_without_drafts_samples_from_p0():
    generator = torch.Generator().manual_seed(0)
    probs = torch.tensor([[0.0, 0.0, 1.0]])
    assert {rejection_verify(probs, torch.tensor([], dtype=torch.long), None, generator).token for _ in range(20)} == {
        2
    }


def test_verify_dispatches_greedy_sampling_and_replay():
    logits = logits_with_argmax([3, 4, 5, 1])  # [4, 6]
    drafted = [3, 4, 0]
    draft_probs = torch.softmax(torch.randn(3, 6, generator=torch.Generator().manual_seed(0)), dim=-1)
    greedy = verify(logits, drafted, draft_probs, SamplingParams())
    assert (greedy.accepted, greedy.token, greedy.probs) == (2, 5, None)

    sampling = SamplingParams(temperature=0.8, top_k=4)
    sampled = verify(logits, drafted, draft_probs, sampling, generator=torch.Generator().manual_seed(7))
    direct = rejection_verify(
        target_probs(logits, sampling), torch.tensor(drafted), draft_probs, torch.Generator().manual_seed(7)
    )
    assert (sampled.accepted, sampled.token) == (direct.accepted, direct.token)
    assert torch.equal(sampled.probs, target_probs(logits, sampling))  # what the display reuses

    for params in (SamplingParams(), sampling):  # a rollout wins over either rule and needs no generator
        replayed = verify(logits, drafted, draft_probs, params, replay=[3, 9, 9, 9])
        assert replayed == replay_verify([3, 9, 9, 9], drafted) == Verdict(1, 9)


def test_verify_refuses_sampling_without_a_generator():
    with pytest.raises(ValueError, match="generator"):
        verify(logits_with_argmax([3, 4]), [3], None, SamplingParams(temperature=1.0))
