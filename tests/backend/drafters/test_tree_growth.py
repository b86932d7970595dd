"""Token trees grown from draft distributions, against hand-worked path scores: the chain-and-siblings
candidate tree reranked to a budget, best-first growth under depth, branching and end-of-sequence
limits, and the autoregressive session drafting either (a draft whose next-token distribution is a
table keyed by the last token, so every node's probability is known)."""

from __future__ import annotations

import pytest
import torch

from backend.core.drafter import DraftRequest
from backend.core.kv import ForwardResult
from backend.core.tree_shape import children, depths, validate
from backend.core.verify import SamplingParams
from backend.drafters.autoregressive import AutoregressiveSession
from backend.drafters.tree_growth import chain_and_siblings, grow, path_scores, top_children

EOS = 5
# the draft's next-token distribution after each token (6 tokens; 5 ends the sequence)
TABLE = {
    0: [0.0, 0.6, 0.25, 0.15, 0.0, 0.0],
    1: [0.0, 0.0, 0.5, 0.4, 0.1, 0.0],
    2: [0.0, 0.2, 0.0, 0.1, 0.0, 0.7],
}


class TableRunner:
    """A draft model whose logits after a token are the log of TABLE's row; its cache is the tokens fed."""

    vocab_size = 6

    def __init__(self) -> None:
        self.fed: list[int] = []  # every token passed to forward, to count passes

    def new_cache(self) -> list[int]:
        return []

    def forward(self, tokens: list[int], cache: list[int]) -> ForwardResult:
        cache.extend(tokens)
        self.fed.extend(tokens)
        return ForwardResult(torch.tensor(TABLE[cache[-1]]).log()[None], None)  # [1, V]

    def keep(self, cache: list[int], keep: int) -> None:
        del cache[keep:]


def propose(max_tokens: int, max_nodes: int = 0, branching: int = 1, sampling: SamplingParams | None = None):
    session = AutoregressiveSession(TableRunner(), {EOS})
    request = DraftRequest([0], max_tokens, sampling or SamplingParams(), torch.Generator(), max_nodes, branching)
    return session.propose(request)


def test_path_scores_multiply_down_the_tree():
    assert path_scores([-1, 0, 1, -1], [0.5, 0.4, 0.5, 0.25]) == pytest.approx([0.5, 0.2, 0.1, 0.25])


def test_top_children_map_a_reduced_vocabulary():
    probs = torch.tensor([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]])
    rows = top_children(probs, 2, ids=torch.tensor([10, 20, 30]), state="s")
    assert [row.tokens for row in rows] == [[20, 30], [10, 30]]
    assert rows[0].probs == pytest.approx([0.7, 0.2]) and rows[1].state == "s"


def test_the_chain_keeps_its_siblings_and_the_budget_keeps_the_best_paths():
    rows = torch.tensor([TABLE[0], TABLE[1], TABLE[2]])  # the chain 1, 2, 5 was drafted from these
    tree = chain_and_siblings(rows, [1, 2, 5], branching=2, budget=10)
    # path scores: 1 .6, 1-2 .3, 2 .25, 1-3 .24, 1-2-5 .21, 1-2-1 .06, best first
    assert tree.tokens == [1, 2, 2, 3, 5, 1] and tree.parents == [-1, 0, -1, 0, 1, 1]
    assert tree.probs == pytest.approx([0.6, 0.5, 0.25, 0.4, 0.7, 0.2])
    cut = chain_and_siblings(rows, [1, 2, 5], branching=2, budget=4)
    assert cut.tokens == [1, 2, 2, 3] and cut.parents == [-1, 0, -1, 0]
    chain = chain_and_siblings(rows, [1, 2, 5], branching=1, budget=10)
    assert chain.tokens == [1, 2, 5] and chain.parents == [-1, 0, 1]


def test_best_first_growth_respects_budget_depth_branching_and_leaves():
    slots = [top_children(torch.tensor([[0.6, 0.3, 0.1]]), 2)[0], top_children(torch.tensor([[0.1, 0.2, 0.7]]), 2)[0]]
    seen: list[tuple[int, int]] = []

    def expand(token, depth, state):
        seen.append((token, depth))
        return slots[depth]

    tree = grow(9, expand, budget=5, max_depth=2, leaves=set())
    # 0 .6, 0-2 .42, 1 .3, 1-2 .21, 0-1 .12 (0-1 beats 1-1 .06)
    assert tree.tokens == [0, 2, 1, 2, 1] and tree.parents == [-1, 0, -1, 2, 0]
    assert tree.depth == 2 and seen == [(9, 0), (0, 1), (1, 1)]  # only depth-1 nodes grow children
    leafy = grow(9, expand, budget=5, max_depth=2, leaves={0})
    assert leafy.tokens == [0, 1, 2, 1] and leafy.parents == [-1, -1, 1, 1]  # 0 ends the sequence: no children
    assert grow(9, expand, budget=5, max_depth=0, leaves=set()).tokens == []


def test_a_chain_request_drafts_as_before():
    draft = propose(4)
    assert draft.tokens == [1, 2, 5] and draft.parents is None and draft.stop_reason == "eos"
    assert draft.confidence == pytest.approx([0.6, 0.5, 0.7]) and draft.probs is None


def test_a_tree_request_adds_each_depths_next_tokens_beside_the_chain():
    draft = propose(4, max_nodes=10, branching=2)
    assert draft.tokens == [1, 2, 2, 3, 5, 1] and draft.parents == [-1, 0, -1, 0, 1, 1]
    assert draft.probs is None and draft.stop_reason == "eos"
    assert draft.confidence == pytest.approx([0.6, 0.5, 0.25, 0.4, 0.7, 0.2])
    wide = propose(2, max_nodes=5, branching=3)  # 1 .6, 1-2 .3, 2 .25, 1-3 .24, 3 .15 (1-4 .06 left out)
    validate(wide.parents)
    assert wide.tokens == [1, 2, 2, 3, 3] and wide.parents == [-1, 0, -1, 0, -1]
    assert max(depths(wide.parents)) <= 2 and max(len(below) for below in children(wide.parents)) <= 3


def test_a_sampled_tree_is_still_the_greedy_chain_and_its_siblings():
    sampled = propose(4, max_nodes=10, branching=2, sampling=SamplingParams(temperature=1.0))
    assert sampled.tokens == [1, 2, 2, 3, 5, 1] and sampled.probs is None


def test_a_small_budget_drafts_no_deeper_than_it_can_keep():
    session = AutoregressiveSession(runner := TableRunner(), {EOS})
    draft = session.propose(DraftRequest([0], 4, SamplingParams(), torch.Generator(), max_nodes=2, branching=2))
    assert draft.tokens == [1, 2] and draft.parents == [-1, 0]  # .6, .3 beat the sibling 2 (.25)
    assert runner.fed == [0, 1]  # two forwards: a third node could not be at depth 3
