"""Token trees: the host-side shape helpers, greedy and replay verification of a tree against a
one-node-at-a-time walk, and the chain case agreeing with the chain rules."""

import random

import pytest
import torch

from backend.core.errors import SpecScopeError
from backend.core.tree import TreeLayout, ancestors
from backend.core.tree_shape import best_nodes, children, depths, is_chain, path_to, validate, within_depth
from backend.core.verify import SamplingParams, greedy_tree_verify, greedy_verify, replay_tree_verify, verify

# root -> 0 -> 2 -> 4; root -> 1 -> 3; root -> 5
PARENTS = [-1, -1, 0, 1, 2, -1]


def random_parents(rng: random.Random, size: int) -> list[int]:
    return [rng.randrange(-1, node) for node in range(size)]


def test_depths_paths_children_and_chains():
    assert depths(PARENTS) == [1, 1, 2, 2, 3, 1]
    assert path_to(PARENTS, 4) == [0, 2, 4]
    assert path_to(PARENTS, 3) == [1, 3]
    assert path_to(PARENTS, -1) == []
    assert children(PARENTS) == [[0, 1, 5], [2], [3], [4], [], [], []]
    assert is_chain([-1, 0, 1]) and is_chain([])
    assert not is_chain(PARENTS)


def test_ancestors_include_the_root_and_the_node_itself():
    mask = ancestors(PARENTS)  # rows: 0 = root, i + 1 = node i
    assert mask.shape == (7, 7)
    assert mask[5].nonzero().flatten().tolist() == [0, 1, 3, 5]  # node 4: root, nodes 0, 2, 4
    assert mask[4].nonzero().flatten().tolist() == [0, 2, 4]  # node 3: root, nodes 1, 3
    assert mask[0].nonzero().flatten().tolist() == [0]


@pytest.mark.parametrize("bad", [[0], [-1, 1], [-2]])
def test_a_parent_after_its_child_is_refused(bad):
    with pytest.raises(SpecScopeError, match="parent must be -1 or an earlier node"):
        validate(bad)


def test_within_depth_keeps_shallow_nodes_renumbered():
    assert within_depth(PARENTS, 2) == ([0, 1, 2, 3, 5], [-1, -1, 0, 1, -1])
    assert within_depth(PARENTS, 1) == ([0, 1, 5], [-1, -1, -1])


def test_best_nodes_keep_the_highest_path_scores_with_their_ancestors():
    scores = [0.6, 0.3, 0.5, 0.2, 0.1, 0.05]  # each node's path probability, never above its parent's
    assert best_nodes(PARENTS, scores, 3) == ([0, 1, 2], [-1, -1, 0])
    assert best_nodes(PARENTS, scores, 4) == ([0, 1, 2, 3], [-1, -1, 0, 1])
    assert best_nodes(PARENTS, scores, 0) == ([], [])
    assert best_nodes(PARENTS, scores, 10) == (list(range(6)), PARENTS)
    tied = [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]  # ties go to earlier nodes: parents before children
    kept, parents = best_nodes(PARENTS, tied, 3)
    assert kept == [0, 1, 2] and parents == [-1, -1, 0]


def host_greedy_walk(best: list[int], tokens: list[int], parents: list[int]) -> tuple[int, int]:
    """The deepest root path whose nodes each equal the argmax at their parent, found node by node:
    (its depth, the argmax after it). Ties between equally deep paths go to the earlier node."""
    ok = {-1: True}
    deepest, deepest_depth = -1, 0
    for node, (parent, depth) in enumerate(zip(parents, depths(parents), strict=True)):
        ok[node] = ok[parent] and tokens[node] == best[parent + 1]
        if ok[node] and depth > deepest_depth:
            deepest, deepest_depth = node, depth
    return deepest_depth, best[deepest + 1]


@pytest.mark.parametrize("seed", range(40))
def test_greedy_tree_verify_equals_a_host_walk_on_random_trees(seed):
    rng = random.Random(seed)
    vocab, size = 4, rng.randrange(1, 12)
    parents = random_parents(rng, size)
    tokens = [rng.randrange(vocab) for _ in parents]
    logits = torch.randn(size + 1, vocab, generator=torch.Generator().manual_seed(seed))  # [N+1, V]
    best = logits.argmax(-1).tolist()
    verdict = greedy_tree_verify(logits, torch.tensor(tokens), TreeLayout.of(parents, torch.device("cpu")))
    assert (verdict.accepted, verdict.token) == host_greedy_walk(best, tokens, parents)
    path = list(verdict.path)
    assert len(path) == verdict.accepted and path == path_to(parents, path[-1] if path else -1)
    assert all(tokens[node] == best[parents[node] + 1] for node in path)


@pytest.mark.parametrize("seed", range(10))
def test_greedy_tree_verify_equals_greedy_verify_on_chains(seed):
    generator = torch.Generator().manual_seed(seed)
    size = seed % 5 + 1
    logits = torch.randn(size + 1, 3, generator=generator)  # [D+1, V]
    drafted = logits.argmax(-1)[:size].clone()
    drafted[seed % size] = (drafted[seed % size] + seed % 2) % 3  # a mismatch on odd seeds
    chain = TreeLayout.of(list(range(-1, size - 1)), torch.device("cpu"))
    tree_verdict = greedy_tree_verify(logits, drafted, chain)
    assert (tree_verdict.accepted, tree_verdict.token) == (
        greedy_verify(logits, drafted).accepted,
        greedy_verify(logits, drafted).token,
    )
    assert tree_verdict.path == tuple(range(tree_verdict.accepted))


def test_greedy_tree_verify_takes_a_later_sibling():
    # argmax at the root is 7: the first child (6) is wrong, the second (7) right, its child 9 right
    best = [7, 0, 9, 0]  # rows: root, node 0 (6), node 1 (7), node 2 (9)
    logits = torch.nn.functional.one_hot(torch.tensor(best), 10).float() * 5  # [4, 10]
    layout = TreeLayout.of([-1, -1, 1], torch.device("cpu"))
    verdict = greedy_tree_verify(logits, torch.tensor([6, 7, 9]), layout)
    assert (verdict.accepted, verdict.token, verdict.path) == (2, 0, (1, 2))


def test_replay_tree_walks_the_rollout():
    # rollout 7 9 3: node 1 (7), then its child node 2 (9); no child 3 below it
    verdict = replay_tree_verify([7, 9, 3], [6, 7, 9, 5], [-1, -1, 1, 0])
    assert (verdict.accepted, verdict.token, verdict.path) == (2, 3, (1, 2))
    assert replay_tree_verify([4], [6, 7], [-1, -1]) == replay_tree_verify([4], [], [])


def test_verify_dispatches_trees_to_greedy_replay_and_sampling():
    layout = TreeLayout.of([-1, -1], torch.device("cpu"))
    logits = 50 * torch.nn.functional.one_hot(torch.tensor([2, 0, 1]), 4).float()  # [3, 4], sharp rows
    assert verify(logits, [1, 2], None, SamplingParams(), tree=layout).path == (1,)
    assert verify(logits, [1, 2], None, SamplingParams(), replay=[1, 3], tree=layout).path == (0,)
    sampled = verify(logits, [1, 2], None, SamplingParams(temperature=1.0), generator=torch.Generator(), tree=layout)
    assert (sampled.path, sampled.token, sampled.probs.shape) == ((1,), 1, (3, 4))
    with pytest.raises(ValueError, match="deterministic"):
        verify(logits, [1, 2], torch.ones(2, 4) / 4, SamplingParams(temperature=1.0), None, torch.Generator(), layout)
