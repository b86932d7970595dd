"""The acceptance rules: hand-worked greedy cases, and the rejection-sampling law checked exactly."""

import pytest
import torch
from scipy.stats import chisquare

from backend.core.errors import SpecScopeError
from backend.core.verify import SamplingParams, greedy_verify, rejection_verify, target_probs


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


@pytest.mark.parametrize("one_hot_draft", [False, True])
def test_first_emitted_token_follows_the_target_distribution(one_hot_draft):
    """Leviathan et al. Theorem 1: with d ~ q and the rule, the emitted token is distributed as p.
    Checked by a chi-square goodness-of-fit test at significance 0.001 over 20,000 draws."""
    generator = torch.Generator().manual_seed(1)
    p = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    q = torch.tensor([0.05, 0.10, 0.40, 0.05, 0.30, 0.10])
    probs = torch.stack([p, torch.full((6,), 1 / 6)])  # [2, V]: p_0, then the bonus distribution
    counts = torch.zeros(6)
    draws = 20_000
    for _ in range(draws):
        draft = int(torch.multinomial(q, 1, generator=generator))
        draft_probs = None if one_hot_draft else q[None]
        verdict = rejection_verify(probs, torch.tensor([draft]), draft_probs, generator)
        first = draft if verdict.accepted else verdict.token
        counts[first] += 1
    assert chisquare(counts.numpy(), (p * draws).numpy()).pvalue > 0.001


def test_accepting_every_draft_is_caught_by_the_same_test():
    """Power check: a broken rule that always accepts emits q, and the test rejects it."""
    generator = torch.Generator().manual_seed(1)
    p = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])
    q = torch.tensor([0.05, 0.10, 0.40, 0.05, 0.30, 0.10])
    draws = 20_000
    counts = torch.bincount(torch.multinomial(q, draws, replacement=True, generator=generator), minlength=6)
    assert chisquare(counts.numpy(), (p * draws).numpy()).pvalue < 1e-6
