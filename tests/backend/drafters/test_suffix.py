"""Suffix trees and suffix decoding against hand-worked cases."""

import pytest
import torch

from backend.core.drafter import DraftRequest, StepOutcome
from backend.core.verify import SamplingParams
from backend.drafters.suffix import SuffixDrafter, SuffixTree


def count(tree: SuffixTree, *path: int) -> int:
    node = tree.root
    for token in path:
        node = node.children.get(token)
        if node is None:
            return 0
    return node.count


def test_counts_are_substring_occurrences():
    tree = SuffixTree(max_depth=3)
    tree.extend(0, [1, 2, 1, 2, 3])
    assert count(tree, 1) == 2 and count(tree, 2) == 2 and count(tree, 3) == 1
    assert count(tree, 1, 2) == 2 and count(tree, 2, 1) == 1 and count(tree, 2, 3) == 1
    assert count(tree, 1, 2, 1) == 1 and count(tree, 1, 2, 3) == 1
    assert count(tree, 2, 1, 2, 3) == 0  # deeper than max_depth is not stored


def test_extend_continues_a_sequence_across_calls():
    whole, parts = SuffixTree(4), SuffixTree(4)
    whole.extend(0, [1, 2, 3, 1, 2])
    parts.extend(0, [1, 2])
    parts.extend(0, [3, 1, 2])
    assert count(parts, 3, 1, 2) == count(whole, 3, 1, 2) == 1
    assert count(parts, 1, 2) == count(whole, 1, 2) == 2


def test_remove_undoes_extend():
    tree = SuffixTree(3)
    tree.extend(1, [1, 2, 3])
    tree.extend(2, [2, 3, 4])
    tree.remove(1, [1, 2, 3])
    assert count(tree, 1) == 0 and count(tree, 2, 3) == 1 and count(tree, 2, 3, 4) == 1
    tree.remove(2, [2, 3, 4])
    assert tree.root.children == {}


def test_best_path_follows_the_most_frequent_child_with_path_probabilities():
    tree = SuffixTree(8)
    # after "7 8": 9 follows twice, 5 once; after "7 8 9": 1 both times
    tree.extend(0, [7, 8, 9, 1, 0, 7, 8, 9, 1, 0, 7, 8, 5, 0])
    path = tree.best_path([4, 7, 8], max_tokens=3, max_spec_factor=2.0, max_spec_offset=0.0, min_token_prob=0.1)
    assert path.tokens == [9, 1, 0]
    assert path.probs == pytest.approx([2 / 3, 2 / 3, 2 / 3])
    assert path.match_len == 2


def test_spec_factor_and_min_prob_limit_the_path():
    tree = SuffixTree(8)
    tree.extend(0, [7, 8, 9, 1, 0, 7, 8, 9, 1, 0, 7, 8, 5, 0])
    short = tree.best_path([8], max_tokens=8, max_spec_factor=1.0, max_spec_offset=0.0, min_token_prob=0.1)
    assert len(short.tokens) == 1  # match length 1 x factor 1.0
    strict = tree.best_path([7, 8], max_tokens=8, max_spec_factor=4.0, max_spec_offset=0.0, min_token_prob=0.7)
    assert strict.tokens == []  # 2/3 < 0.7


def test_global_tree_carries_earlier_outputs_and_evicts_oldest():
    drafter = SuffixDrafter(38.0, max_depth=8, min_token_prob=0.1)
    drafter.max_cached_requests = 1
    first = drafter.start([1, 2], {})
    first.observe(StepOutcome([30, 31, 32, 33, 34], 4))
    first.close()
    second = drafter.start([5, 6], {})
    request = DraftRequest([5, 6, 30, 31], 3, SamplingParams(), torch.Generator())
    draft = second.propose(request)
    assert draft.tokens == [32, 33] and draft.evidence == "m2"  # from the global tree; factor 1 x match 2
    second.observe(StepOutcome([40], 0))
    second.close()  # evicts the first request's output
    third = drafter.start([5, 6], {})
    assert third.propose(request).tokens == []


def test_local_tree_includes_the_output_so_far():
    session = SuffixDrafter(38.0, max_depth=8).start([1, 2, 3], {})
    session.observe(StepOutcome([10, 11, 12, 13, 10, 11], 0))
    draft = session.propose(DraftRequest([1, 2, 3, 10, 11, 12, 13, 10, 11], 4, SamplingParams(), torch.Generator()))
    assert draft.tokens == [12, 13]


def learnt(drafter: SuffixDrafter, prompt: list[int], output: list[int]) -> None:
    session = drafter.start(prompt, {})
    session.observe(StepOutcome(output, 0))
    session.close()


def test_a_fork_starts_from_the_parents_tree_and_keeps_what_it_learns_to_itself():
    parent = SuffixDrafter(38.0, max_depth=8)
    learnt(parent, [1, 2], [30, 31, 32, 33])
    fork, other = parent.fork(), parent.fork()
    request = DraftRequest([5, 6, 30, 31], 3, SamplingParams(), torch.Generator())
    assert fork.start([5, 6], {}).propose(request).tokens == [32, 33]  # the parent's memory, from the start
    assert fork.memory() == parent.memory() == {"sequences": 1, "tokens": 4}
    learnt(fork, [7], [40, 41, 42, 43])
    assert fork.memory() == {"sequences": 2, "tokens": 8} and fork.learned() == [[40, 41, 42, 43]]
    assert parent.memory() == {"sequences": 1, "tokens": 4} and count(parent.global_tree, 40) == 0
    assert other.learned() == [] and count(other.global_tree, 40) == 0  # a sibling fork sees none of it
    parent.learn([40, 41, 42, 43])
    assert count(parent.global_tree, 40, 41) == 1 and parent.memory()["sequences"] == 2


def test_a_copied_tree_has_the_same_counts_and_child_order():
    tree = SuffixTree(4)
    tree.extend(0, [3, 1, 2, 3, 2, 1])
    copy = tree.copy()
    assert list(copy.root.children) == list(tree.root.children) == [3, 1, 2]
    copy.extend(1, [9])
    assert count(tree, 9) == 0 and count(copy, 9) == 1
    for path in ([3], [1, 2], [2, 3, 2], [2, 1]):
        assert count(copy, *path) == count(tree, *path)
