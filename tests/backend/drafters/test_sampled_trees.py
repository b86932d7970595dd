"""Sampling through the engine with the draft-model and DSpark drafters' token trees keeps the target's
distribution: the first two tokens of many seeded runs on the 12-token target against the exact joint
(chi-square at significance 0.001). Trees are deterministic picks, verified by multi-candidate rejection
sampling."""

from __future__ import annotations

import pytest
import torch

from backend.drafters import dspark
from backend.drafters.draft_model import DraftModelDrafter
from tests.helpers.sampling import SETTINGS, SIGNIFICANCE, sampling_model, tree_sampling_fits

SAMPLES = 800


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The tiny models' matrices are too small to share out: one thread runs these loops faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def check(target, drafter, sampling) -> None:
    assert tree_sampling_fits(target, drafter, sampling, tree_budget=6, samples=SAMPLES) > SIGNIFICANCE


@pytest.mark.parametrize("sampling", SETTINGS, ids=["T1", "T0.7-topk6-topp0.9"])
def test_draft_model_trees_sample_the_target(pair, sampling):
    target, draft = pair
    check(target, DraftModelDrafter(target, draft), sampling)


def test_dspark_trees_sample_the_target():
    target = sampling_model()
    head = dspark.new_head(target, {"block_size": 3}, d2t=torch.tensor([0, 2, 4, 5, 6, 7, 8, 11]))
    with torch.no_grad():  # a Markov head that makes each node's children depend on its token
        head.markov_out.weight.normal_(generator=torch.Generator().manual_seed(0))
    check(target, dspark.DSparkDrafter(target, head, threshold=0.0), SETTINGS[0])
