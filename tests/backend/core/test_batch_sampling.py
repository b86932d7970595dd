"""Sampled rows of a batch draw what they would draw alone: row r of a batch seeded s outputs the tokens of a
single sequence seeded s + r, for every registered drafter without memory across requests, its token trees
and a confidence stop. The sampling chi-squares draw their samples in batches (tests/helpers/sampling.py),
so this is what makes their verdict hold for the single-sequence engine as well. A drafter that remembers
requests (suffix decoding's global tree) drafts from what the batch's finished rows taught it, so its rows
and single runs see different drafts: its chi-square checks the batched law alone."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backend.core.batch import BatchEngine, RowResult
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.drafters import TREE_DRAFTERS
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.sampling import PROMPT, SETTINGS

ROWS = 12
REMEMBERING = ("suffix",)  # drafters with memory across requests (drafter.py's RemembersRequests)


def test_the_drafters_left_out_are_those_that_remember_requests(pair):
    target, draft = pair
    remembering = [name for name in EVERY_DRAFTER if hasattr(registered_drafter(name, target, draft), "fork")]
    assert remembering == list(REMEMBERING)


def rows_and_singles(pair, name: str, settings: GenerationSettings) -> tuple[list[RowResult], list[list[int]]]:
    target, draft = pair
    drafter = registered_drafter(name, target, draft)
    engine = SpeculativeEngine(target.model, eos_ids=set(), max_context=64)
    batched = BatchEngine(engine).generate([PROMPT] * ROWS, drafter, settings).rows
    alone = [
        engine.generate(PROMPT, drafter, replace(settings, seed=settings.seed + row)).run().output_ids
        for row in range(ROWS)
    ]
    return batched, alone


@pytest.mark.parametrize("sampling", SETTINGS, ids=["T1", "T0.7-topk6-topp0.9"])
@pytest.mark.parametrize("name", [name for name in EVERY_DRAFTER if name not in REMEMBERING])
def test_every_drafters_batched_rows_draw_their_single_sequences_tokens(pair, name, sampling):
    batched, alone = rows_and_singles(pair, name, GenerationSettings(8, draft_len=3, sampling=sampling, seed=5))
    assert [row.output_ids for row in batched] == alone
    assert len({tuple(tokens) for tokens in alone}) > 1  # the seeds drew different samples


@pytest.mark.parametrize("name", [name for name in TREE_DRAFTERS if name not in ("ngram", "suffix")])
def test_token_tree_rows_and_confidence_stops_draw_their_single_sequences_tokens(pair, name):
    sampling = SETTINGS[0]
    trees, alone = rows_and_singles(pair, name, GenerationSettings(8, draft_len=2, sampling=sampling, tree_budget=6))
    assert [row.output_ids for row in trees] == alone
    assert any(step.parents for row in trees for step in row.steps)  # some rows drafted branching trees
    confident = GenerationSettings(8, draft_len=3, sampling=sampling, min_confidence=0.3)
    stops, alone = rows_and_singles(pair, name, confident)
    assert [row.output_ids for row in stops] == alone
    assert any(step.stop_reason == "low-confidence" for row in stops for step in row.steps)
