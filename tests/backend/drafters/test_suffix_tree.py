"""Suffix decoding's speculation trees against hand-worked histories: best-first by path probability,
the budget, depth, branching and min_token_prob limits, the better of the local and global trees, and
greedy decoding through the engine that gives plain greedy's output."""

from __future__ import annotations

import pytest
import torch

from backend.core.drafter import DraftRequest
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.metrics import summary
from backend.core.tree_shape import children, depths, path_to, validate
from backend.core.verify import SamplingParams
from backend.drafters import build_drafter
from backend.drafters.suffix import SuffixDrafter, SuffixTree
from tests.helpers.trees import later_sibling_accepted

# "1 2" occurs 5 times: followed by 3 three times (then 4 twice, 5 once, each then 9), by 6 once (then
# 9, 1) and by nothing at the end. Path probabilities: 3 = 3/5, 6 = 1/5, 3-4 = 3/5 * 2/3, 3-5 = 3/5 * 1/3
HISTORY = [1, 2, 3, 4, 9, 1, 2, 3, 4, 9, 1, 2, 3, 5, 9, 1, 2, 6, 9, 1, 2]


def grow(max_tokens=3, max_nodes=5, branching=2, min_token_prob=0.1, history=HISTORY):
    tree = SuffixTree(max_depth=8)
    tree.extend(0, history)
    # a spec factor of 8 lets even a one-token match draft max_tokens deep
    return tree.best_tree(history, max_tokens, 8.0, 0.0, min_token_prob, max_nodes, branching)


def test_the_tree_is_grown_best_first_by_path_probability():
    found = grow()
    assert found.tokens == [3, 4, 9, 6, 5]
    assert found.parents == [-1, 0, 1, -1, 0]
    assert found.probs == pytest.approx([3 / 5, 2 / 5, 2 / 5, 1 / 5, 1 / 5])
    assert found.match_len == 2  # "2" alone gives the same tree; ties go to the longer match
    assert found.score == pytest.approx(9 / 5)


def test_equal_path_probabilities_keep_the_order_they_were_offered_in():
    # after 6 (1/5) comes 9 at 1/5 * 1/1, after 3 comes 5 at 3/5 * 1/3: equal, and 5 was offered first
    found = grow(max_nodes=8)
    assert found.tokens[3:6] == [6, 5, 9] and found.parents[3:6] == [-1, 0, 3]


@pytest.mark.parametrize(("max_tokens", "max_nodes", "branching"), [(3, 16, 4), (2, 16, 4), (3, 4, 2), (3, 8, 1)])
def test_budget_depth_and_branching_hold_in_a_valid_tree(max_tokens, max_nodes, branching):
    found = grow(max_tokens, max_nodes, branching)
    validate(found.parents)
    assert 0 < len(found.tokens) <= max_nodes
    assert max(depths(found.parents)) == max_tokens
    assert max(len(below) for below in children(found.parents)) <= branching
    for below in children(found.parents):  # no two children of one node propose the same token
        assert len({found.tokens[node] for node in below}) == len(below)
    ranks = [round(prob, 9) for prob in found.probs]
    assert ranks == sorted(ranks, reverse=True)  # best first: any prefix is the best tree of its size
    for node, parent in enumerate(found.parents):  # a path probability never exceeds its parent's
        assert parent < 0 or found.probs[node] <= found.probs[parent]


def test_the_whole_tree_within_its_limits():
    found = grow(max_tokens=3, max_nodes=16, branching=4)
    paths = {tuple(found.tokens[node] for node in path_to(found.parents, leaf)) for leaf in range(len(found.tokens))}
    assert paths == {(3,), (3, 4), (3, 4, 9), (3, 5), (3, 5, 9), (6,), (6, 9), (6, 9, 1)}


def test_branching_one_is_the_chain_and_the_first_branch_is_the_chain():
    tree = SuffixTree(8)
    tree.extend(0, HISTORY)
    chain = tree.best_path(HISTORY, 3, 8.0, 0.0, 0.1)
    assert chain.tokens == [3, 4, 9] and chain.match_len == 2
    single = grow(max_nodes=8, branching=1)
    assert single.tokens == chain.tokens and single.parents == [-1, 0, 1]
    assert single.probs == pytest.approx(chain.probs)
    wide = grow(max_nodes=8, branching=4)
    first_branch = path_to(wide.parents, 2)
    assert [wide.tokens[node] for node in first_branch] == chain.tokens


def test_min_token_prob_prunes_unlikely_nodes():
    found = grow(max_nodes=16, min_token_prob=0.3)
    assert found.tokens == [3, 4, 9] and found.parents == [-1, 0, 1]
    assert min(found.probs) >= 0.3
    assert len(grow(max_nodes=16, min_token_prob=0.1).tokens) == 8


def test_a_short_match_drafts_a_shallow_tree():
    tree = SuffixTree(8)
    tree.extend(0, HISTORY)
    # spec factor 1: a match of n tokens drafts at most n deep (the context "1 2" matches 2: depth 2)
    found = tree.best_tree([1, 2], 3, 1.0, 0.0, 0.1, 16, 4)
    assert found.tokens == [3, 4, 6, 5, 9] and max(depths(found.parents)) == 2 and found.match_len == 2
    # with the whole history, "9 1 2" matches too: 3 deep, its tree scores 1/2 + 7 x 1/4 against 8/5
    found = tree.best_tree(HISTORY, 3, 1.0, 0.0, 0.1, 16, 4)
    assert max(depths(found.parents)) == 3 and found.match_len == 3 and found.score == pytest.approx(9 / 4)


def request(tokens, max_tokens=2, max_nodes=4, branching=2):
    return DraftRequest(tokens, max_tokens, SamplingParams(), torch.Generator(), max_nodes, branching)


def test_the_session_proposes_a_tree_only_when_asked():
    session = SuffixDrafter(1.0, max_depth=8, max_spec_factor=8.0).start(HISTORY, {})
    chain = session.propose(request(HISTORY, max_tokens=3, max_nodes=0))
    assert chain.tokens == [3, 4, 9] and chain.parents is None
    tree = session.propose(request(HISTORY, max_tokens=3, max_nodes=5))
    assert tree.tokens == [3, 4, 9, 6, 5] and tree.parents == [-1, 0, 1, -1, 0]
    assert tree.confidence == pytest.approx([3 / 5, 2 / 5, 2 / 5, 1 / 5, 1 / 5])
    assert tree.probs is None and tree.evidence == chain.evidence == "m2"
    assert session.propose(request([30, 31], max_nodes=5)).stop_reason == "no-match"


def test_the_global_tree_learned_by_a_fork_drafts_trees():
    parent = SuffixDrafter(1.0, max_depth=8)
    fork = parent.fork()
    # "5 6" was followed by 7 twice and by 8 once, then each by 5
    fork.learn([5, 6, 7, 5, 6, 8, 5, 6, 7])
    prompt = [1, 2, 5, 6]  # nothing in the prompt follows "5 6"
    tree = fork.start(prompt, {}).propose(request(prompt))
    assert tree.tokens == [7, 8, 5, 5] and tree.parents == [-1, -1, 0, 1]
    assert tree.confidence == pytest.approx([2 / 3, 1 / 3, 1 / 3, 1 / 3])
    assert parent.start(prompt, {}).propose(request(prompt)).stop_reason == "no-match"


def test_the_better_scoring_tree_is_proposed_whole_not_merged():
    drafter = SuffixDrafter(1.0, max_depth=8)
    drafter.learn([5, 6, 7, 5, 6, 8])  # global: "5 6" -> 7 (1/2) -> 5 (1/2) | 8 (1/2), scoring 3/2
    prompt = [5, 6, 9, 1, 5, 6]  # local: "5 6" -> 9 (1/2) -> 1 (1/2), scoring 1
    tree = drafter.start(prompt, {}).propose(request(prompt))
    assert tree.tokens == [7, 8, 5] and tree.parents == [-1, -1, 0]
    prompt = [5, 6, 9, 1] * 4 + [5, 6]  # local: "5 6" -> 9 (4/5) -> 1 (4/5), scoring 8/5
    tree = drafter.start(prompt, {}).propose(request(prompt))
    assert tree.tokens == [9, 1] and tree.confidence == pytest.approx([4 / 5, 4 / 5])


REPETITIVE = [5, 9, 13, 22, 5, 9, 13, 40, 41, 5, 9, 13, 22, 7, 8, 5, 9, 13, 40, 41, 5, 9, 13, 22]


def generate(model, drafter, **settings):
    engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context)
    return engine.generate(REPETITIVE, drafter, GenerationSettings(60, **settings)).run()


def test_suffix_trees_decode_as_plain_greedy_and_accept_at_least_as_much_as_chains(tiny):
    plain = generate(tiny, None, draft_len=0)
    chain = generate(tiny, build_drafter("suffix", tiny), draft_len=4)
    tree = generate(tiny, build_drafter("suffix", tiny), draft_len=4, tree_budget=8, tree_topk=4)
    assert tree.output_ids == chain.output_ids == plain.output_ids
    tree_steps = [step for step in tree.steps if step.parents is not None]
    assert tree_steps, "no step drafted a tree"
    for step in tree_steps:
        assert len(step.drafted) <= 8 and max(depths(step.parents)) <= 4
        assert (
            step.emitted
            == [*(step.drafted[node] for node in step.accepted_path), step.target_token][: len(step.emitted)]
        )
    assert any(later_sibling_accepted(step) for step in tree_steps)  # a branch other than the first paid off
    assert summary(tree.steps)["al"] >= summary(chain.steps)["al"]
    assert len(tree.steps) <= len(chain.steps)
