"""EAGLE-2's dynamic draft tree for the chain heads (EAGLE-3, MTP) on tiny random Llamas: the tree mask gives
each node the state of its own root path unrolled as a chain, the tree keeps to its budget, depth and
branching, its first branch is the greedy chain, an end of sequence is a leaf, nothing of the tree stays
in the draft cache, and decoding through trees is lossless in batches (sampled trees:
tests/backend/core/test_sampling.py)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from backend.core.batch import BatchEngine
from backend.core.drafter import Draft, DraftRequest
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.tree_shape import children, depths, path_to, validate
from backend.drafters import eagle3, mtp
from backend.drafters.feature_chain import FeatureSession
from backend.drafters.feature_tree import GrownTree, grow
from tests.helpers.trained import GREEDY, PROMPT, reduced_d2t

KINDS = {"eagle3": eagle3, "mtp": mtp}


def session_of(kind: ModuleType, model, d2t: torch.Tensor | None = None, peaked: bool = False) -> FeatureSession:
    """A fresh head's session fed PROMPT's hidden states as the engine would; `peaked` sharpens the head's
    logits 100-fold, so its most probable token is nearly certain at every step."""
    head = kind.new_head(model, d2t=d2t).eval()
    if peaked:
        plain = head.logits
        head.logits = lambda h: 100 * plain(h)
    drafter = kind.drafter(model, head)
    with torch.inference_mode():
        states = model.model(torch.tensor([PROMPT[:-1]]), output_hidden_states=True).hidden_states
    return drafter.start(PROMPT, {layer: states[layer][0] for layer in drafter.target_hidden_layers})


def request(max_tokens: int, max_nodes: int = 0, branching: int = 1) -> DraftRequest:
    return DraftRequest(PROMPT, max_tokens, GREEDY, torch.Generator().manual_seed(0), max_nodes, branching)


def first_branch(draft: Draft) -> list[int]:
    """The tokens along the first child of the root, then of each node, down to a leaf."""
    below, row, branch = children(draft.parents), 0, []
    while below[row]:
        node = below[row][0]
        branch.append(draft.tokens[node])
        row = node + 1
    return branch


@pytest.mark.parametrize("name, d2t", [("eagle3", None), ("eagle3", reduced_d2t()), ("mtp", None)])
def test_a_nodes_state_in_the_tree_pass_is_its_root_path_unrolled_as_a_chain(tiny, name, d2t):
    session = session_of(KINDS[name], tiny, d2t)
    head = session.head
    with torch.inference_mode():
        assert session.catch_up(PROMPT)
        tree: GrownTree = grow(head, session.cache, session.last, request(4, 50, 3), set())
        session.cache.trim(session.stable)
        below = children(tree.parents)
        assert len(tree.tokens) == 3 + 9 + 9 + 9  # k at depth 1, then k children for each of k frontier nodes
        assert len(tree.slots) == 9 and {0, 1, 2} <= set(tree.slots)  # k frontier nodes at each of 3 depths
        for node in tree.slots:  # every expanded node: its state is its children's source
            h = session.last  # [1, 1, H]
            for depth, step in enumerate(path_to(tree.parents, node), start=1):
                ids = torch.tensor([[tree.tokens[step]]])
                h = head.step(head.embed(ids), h, torch.tensor([[session.stable + depth - 1]]), session.cache)
            session.cache.trim(session.stable)
            kids = below[node + 1]
            assert torch.allclose(tree.sources[kids[0]], h[0, 0], atol=1e-5)
            chain_log_q = torch.log_softmax(head.logits(h[0, 0]).float(), dim=-1)  # [Vd]
            assert [tree.tokens[kid] for kid in kids] == head.d2t[chain_log_q.topk(3).indices].tolist()
            expected = [tree.scores[node] + value for value in chain_log_q.topk(3).values.tolist()]
            assert [tree.scores[kid] for kid in kids] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("name", KINDS)
@pytest.mark.parametrize("max_tokens, max_nodes, branching", [(4, 8, 3), (3, 20, 2), (5, 3, 4), (1, 6, 4), (4, 30, 1)])
def test_the_tree_keeps_to_its_budget_depth_and_branching(tiny, name, max_tokens, max_nodes, branching):
    session = session_of(KINDS[name], tiny)
    chain = session.propose(request(max_tokens))
    tree = session.propose(request(max_tokens, max_nodes, branching))
    validate(tree.parents)
    assert 1 <= len(tree.tokens) <= max_nodes and len(tree.parents) == len(tree.tokens)
    assert max(depths(tree.parents)) <= max_tokens
    assert max(len(kids) for kids in children(tree.parents)) <= branching
    assert tree.probs is None and len(tree.confidence) == len(tree.tokens)
    assert all(0 < p <= 1 for p in tree.confidence)
    # the first branch follows the head's most probable token: the greedy chain, as far as it goes
    assert first_branch(tree) == chain.tokens[: len(first_branch(tree))]
    if branching == 1:  # one child per node: the tree is the greedy chain, cut to the budget
        assert tree.tokens == chain.tokens[:max_nodes] and tree.parents == list(range(-1, len(tree.tokens) - 1))
    assert len(session.cache) == session.stable  # the tree's entries left the draft cache


@pytest.mark.parametrize("name", KINDS)
def test_a_confident_heads_first_branch_is_the_whole_greedy_chain(tiny, name):
    session = session_of(KINDS[name], tiny, peaked=True)
    chain = session.propose(request(5))
    tree = session.propose(request(5, 7, 3))
    assert len(chain.tokens) == 5 and first_branch(tree) == chain.tokens
    assert max(depths(tree.parents)) == 5 and len(tree.tokens) == 7  # two budget nodes left for alternatives


def test_an_end_of_sequence_is_never_expanded(tiny):
    session = session_of(eagle3, tiny)
    full = session.propose(request(3, 40, 2))
    first, second = full.tokens[0], full.tokens[1]  # the root's two children
    session.eos_ids = {first}
    cut = session.propose(request(3, 40, 2))
    below = children(cut.parents)
    assert cut.tokens[0] == first and below[1] == [] and cut.stop_reason is None
    assert max(depths(cut.parents)) == 3
    session.eos_ids = {first, second}  # every child of the root ends the sequence: a tree of depth 1
    ended = session.propose(request(3, 40, 2))
    assert ended.tokens == [first, second] and ended.parents == [-1, -1] and ended.stop_reason == "eos"


@pytest.mark.parametrize("name", KINDS)
def test_a_tree_proposal_leaves_nothing_behind(tiny, name):
    session = session_of(KINDS[name], tiny)
    before = session.propose(request(4))
    session.propose(request(4, 12, 3))
    after = session.propose(request(4))
    assert after.tokens == before.tokens and after.confidence == before.confidence


@pytest.mark.parametrize("name", KINDS)
def test_batched_rows_drafting_trees_are_lossless(tiny, name):
    prompts = [PROMPT, [7, 8], [12], [50, 51, 50, 51, 52]]
    engine = SpeculativeEngine(tiny.model, set(), 512)
    drafter = KINDS[name].drafter(tiny, KINDS[name].new_head(tiny))
    settings = GenerationSettings(30, draft_len=3, tree_budget=8, tree_topk=3)
    result = BatchEngine(engine).generate(prompts, drafter, settings)
    singles = [engine.generate(p, None, GenerationSettings(30, draft_len=0)).run().output_ids for p in prompts]
    assert [row.output_ids for row in result.rows] == singles
    assert all(any(step.parents is not None and len(step.drafted) > 3 for step in row.steps) for row in result.rows)
