"""N-gram trees against hand-worked sequences: every occurrence of the longest match contributes,
branches are ranked by count then recency, and the budget, depth and top-k caps hold."""

import numpy as np
import torch

from backend.core.drafter import DraftRequest
from backend.core.tree_shape import children, depths, validate
from backend.core.verify import SamplingParams
from backend.drafters.ngram import NgramDrafter, find_continuations


def tree(tokens, min_n=1, max_n=3, depth=3, budget=16, topk=4):
    return find_continuations(np.array(tokens), min_n, max_n, depth, budget, topk)


def test_the_more_frequent_continuation_comes_first():
    # "4 5" was followed by 6 (twice, at 0 and 6) and by 7 (once, at 3, between them)
    nodes, parents, matched = tree([4, 5, 6, 4, 5, 7, 4, 5, 6, 4, 5], max_n=2, depth=1)
    assert (nodes, parents, matched) == ([6, 7], [-1, -1], 2)


def test_equal_counts_go_to_the_most_recent():
    # 6, 7 and 8 each once; 8 followed the latest occurrence
    nodes, parents, _ = tree([4, 5, 6, 4, 5, 7, 4, 5, 8, 4, 5], max_n=2, depth=1)
    assert nodes == [8, 7, 6] and parents == [-1, -1, -1]


def test_budget_depth_and_topk_hold_and_parents_come_first():
    tokens = [4, 5, 6, 9, 1, 4, 5, 7, 9, 2, 4, 5, 8, 9, 3, 4, 5, 6, 10, 4, 5]
    nodes, parents, matched = tree(tokens, max_n=2, depth=3, budget=7, topk=2)
    validate(parents)
    assert matched == 2 and len(nodes) == 7
    assert max(depths(parents)) <= 3
    assert max(len(below) for below in children(parents)) <= 2
    assert nodes[0] == 6  # 6 followed "4 5" twice
    assert [nodes[node] for node in children(parents)[1]] == [10, 9]  # after 6: 9 and 10 once each, 10 later


def test_shorter_ngrams_add_branches_when_the_longest_has_one_continuation():
    # "3 5" occurred once (-> 6); "5" alone was also followed by 8: a second root branch, after the first
    nodes, parents, matched = tree([3, 5, 6, 1, 5, 8, 2, 3, 5], max_n=2, depth=2, budget=4)
    assert matched == 2
    assert nodes[:2] == [6, 1] and parents[:2] == [-1, 0]
    assert [nodes[node] for node in children(parents)[0]] == [6, 8]


def test_shorter_ngrams_fill_the_root_up_to_topk_children():
    # "4 5" was followed by 6 and 7; "5" alone also by 8: a third root branch with topk 3, not with 2
    history = [4, 5, 6, 4, 5, 7, 9, 5, 8, 4, 5]
    three, parents, _ = find_continuations(np.array(history), 1, 2, 2, 8, 3)
    assert [three[node] for node in children(parents)[0]] == [7, 6, 8]
    two, parents, _ = find_continuations(np.array(history), 1, 2, 2, 8, 2)
    assert [two[node] for node in children(parents)[0]] == [7, 6]


def test_no_match_gives_no_tree():
    assert tree([1, 2, 3, 4]) == ([], [], 0)


def test_the_session_drafts_a_tree_only_when_asked():
    session = NgramDrafter(1.0, 1, 2).start([], {})
    tokens = [4, 5, 6, 4, 5, 7, 4, 5]
    generator = torch.Generator()
    chain = session.propose(DraftRequest(tokens, 2, SamplingParams(), generator))
    assert chain.parents is None and chain.tokens == [7, 4]
    branched = session.propose(DraftRequest(tokens, 2, SamplingParams(), generator, max_nodes=4, branching=2))
    assert branched.tokens == [7, 4, 6, 4] and branched.parents == [-1, 0, -1, 2]
    assert branched.evidence == "n2" and branched.probs is None
