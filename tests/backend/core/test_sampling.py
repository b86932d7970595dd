"""Speculative sampling through the engine samples from the target's distribution.

For a tiny random model with 12 tokens, the exact joint distribution of the first two generated
tokens is computed from the target's logits (after the same temperature / top-k / top-p), and the
engine's samples with each drafter are compared to it with a chi-square goodness-of-fit test at
significance 0.001, with chains (the pair holding two drafts' verdicts, or a draft's and its bonus
token) and with each model drafter's token trees. Deliberately broken rules (every draft accepted; the
bonus drawn from the wrong row) must fail the same test (power checks).
"""

from __future__ import annotations

import pytest
import torch

import backend.core.verify
from backend.core.verify import SamplingParams
from backend.drafters import TREE_DRAFTERS
from backend.drafters.draft_model import DraftModelDrafter
from backend.training import student
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.sampling import (
    REGISTRY_SAMPLES,
    SETTINGS,
    SIGNIFICANCE,
    VOCAB,
    accept_all,
    exact_joint,
    goodness_of_fit,
    sampled_joint,
    tree_sampling_fits,
)


# D = 3 drafts two tokens in the first step (the cap leaves room for the target's own), so the pair is two
# drafts' verdicts; D = 1 puts the bonus token of an accepted draft in the pair
@pytest.mark.parametrize(
    ("sampling", "draft_len"),
    [(SETTINGS[0], 3), (SETTINGS[1], 3), (SETTINGS[0], 1)],
    ids=["T1-D3", "T0.7-topk6-topp0.9-D3", "T1-D1"],
)
def test_draft_model_sampling_matches_the_target(pair, sampling, draft_len):
    target, draft = pair
    counts = sampled_joint(target, DraftModelDrafter(target, draft), sampling, draft_len)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


def test_a_student_drafting_over_a_draft_vocabulary_samples_from_the_target(pair):
    """Its q is zero outside d2t: drafts come from half the vocabulary, the residual supplies the rest."""
    target, _ = pair
    frequent = torch.tensor([9, 1, 8, 2, 7, 3, 0, 0, 0, 0, 0, 0])  # [V]: d2t = tokens 0..5
    head = student.new_head(target, {"share_target_embedding": True, "draft_vocab_size": 6}, frequent)
    assert head.draft_vocabulary.tolist() == [0, 1, 2, 3, 4, 5] and VOCAB == 12
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, student.drafter(target, head), sampling, 3, samples=REGISTRY_SAMPLES)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


@pytest.mark.parametrize("name", EVERY_DRAFTER)
def test_every_registered_drafter_samples_from_the_target(pair, name):
    target, draft = pair
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, registered_drafter(name, target, draft), sampling, 3, samples=REGISTRY_SAMPLES)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


@pytest.mark.parametrize("name", [name for name in TREE_DRAFTERS if name not in ("ngram", "suffix")])
def test_every_model_drafters_token_trees_sample_from_the_target(pair, name):
    """Tree nodes are deterministic picks verified by multi-candidate rejection sampling, whatever drafted
    them. The lookup drafters' trees do not branch on this prompt; the rule on a deterministic tree that
    does, through the engine, is test_tree_sampling.py's."""
    target, draft = pair
    drafter = registered_drafter(name, target, draft)
    sampling = SamplingParams(temperature=1.0)
    assert tree_sampling_fits(target, drafter, sampling, tree_budget=6, samples=REGISTRY_SAMPLES) > SIGNIFICANCE


def test_the_check_catches_a_rule_that_accepts_every_draft(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr(backend.core.verify, "rejection_verify", accept_all)
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, DraftModelDrafter(target, draft), sampling, 3, samples=REGISTRY_SAMPLES)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) < 1e-6


def test_the_check_catches_a_bonus_drawn_from_the_drafts_row(pair, monkeypatch):
    """The real rule fed its last draft's row where the row after it belongs: only the bonus changes."""
    target, draft = pair
    rule = backend.core.verify.rejection_verify

    def bonus_from_the_drafts_row(probs, drafted, draft_probs, generator):
        rows = torch.cat([probs[:-1], probs[-2:-1]]) if len(drafted) else probs  # [D+1, V]
        return rule(rows, drafted, draft_probs, generator)

    monkeypatch.setattr(backend.core.verify, "rejection_verify", bonus_from_the_drafts_row)
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, DraftModelDrafter(target, draft), sampling, 1, samples=REGISTRY_SAMPLES)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) < 1e-6
