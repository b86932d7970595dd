"""Prompt-lookup drafting against hand-worked token sequences."""

import numpy as np
import torch

from backend.core.drafter import DraftRequest
from backend.core.verify import SamplingParams
from backend.drafters.ngram import NgramDrafter, find_continuation


def lookup(tokens, min_n=1, max_n=3, k=4):
    return find_continuation(np.array(tokens), min_n, max_n, k)


def test_longest_ngram_wins_over_shorter():
    # suffix "1 2": the 2-gram occurred at 0 (followed by 3 4); the 1-gram "2" also at 5 (followed by 9)
    assert lookup([1, 2, 3, 4, 7, 2, 9, 1, 2]) == ([3, 4, 7, 2], 2)


def test_most_recent_occurrence_with_a_full_continuation():
    # "5 6" occurs at 0 (-> 1 1 1 1) and at 6 (-> 2 2 2 2); the later one has 4 tokens after it
    tokens = [5, 6, 1, 1, 1, 1, 5, 6, 2, 2, 2, 2, 5, 6]
    assert lookup(tokens, k=4) == ([2, 2, 2, 2], 2)


def test_falls_back_to_earliest_when_recent_is_too_close_to_the_end():
    # the recent "5 6" at 6 is followed by only 2 tokens before the end; the one at 0 by 4+
    tokens = [5, 6, 1, 1, 1, 1, 5, 6, 2, 5, 6]
    assert lookup(tokens, k=4) == ([1, 1, 1, 1], 2)


def test_no_match_and_min_n():
    assert lookup([1, 2, 3, 4]) == ([], 0)
    assert lookup([1, 2, 3, 2], min_n=2) == ([], 0)  # only a 1-gram matches
    assert lookup([7]) == ([], 0)


def test_session_reports_evidence_and_no_match():
    session = NgramDrafter(38.0, 1, 3).start([1, 2, 3, 1, 2], {})
    request = DraftRequest([1, 2, 3, 1, 2], 2, SamplingParams(), torch.Generator())
    draft = session.propose(request)
    assert (draft.tokens, draft.evidence, draft.probs) == ([3, 1], "n2", None)
    empty = session.propose(DraftRequest([1, 2, 3], 2, SamplingParams(), torch.Generator()))
    assert (empty.tokens, empty.stop_reason) == ([], "no-match")
