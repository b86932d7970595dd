"""The draft-model and layer-skip drafters' token trees on tiny random models: the tree's first branch is
the greedy chain the same request would draft without a tree, and beside each chain node sit the next
most probable tokens of the draft's distribution at that depth (read from a fresh forward of the draft);
a smaller budget keeps the nodes of highest path score."""

from __future__ import annotations

import pytest
import torch

from backend.core.drafter import DraftRequest
from backend.core.tree_shape import children, depths, validate
from backend.core.verify import SamplingParams
from backend.drafters.tree_growth import rerank
from tests.helpers.drafters import registered_drafter
from tests.helpers.trained import PROMPT


def propose(drafter, max_tokens: int, max_nodes: int = 0, branching: int = 1):
    session = drafter.start(PROMPT, {})
    return session.propose(DraftRequest(PROMPT, max_tokens, SamplingParams(), torch.Generator(), max_nodes, branching))


def top_tokens(drafter, prefix: list[int], count: int) -> list[int]:
    """The draft's `count` most probable next tokens after prefix, from a fresh cache."""
    runner = drafter.runner
    with torch.inference_mode():
        logits = runner.forward(prefix, runner.new_cache()).logits[-1, : runner.vocab_size]  # [V]
    return logits.topk(count).indices.tolist()


@pytest.mark.parametrize("name", ["draft-model", "layerskip"])
def test_the_tree_is_the_chain_with_each_depths_next_tokens_beside_it(tiny, tiny_other, name):
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=2)
    chain = propose(drafter, 4).tokens
    tree = propose(drafter, 4, max_nodes=12, branching=3)
    validate(tree.parents)
    assert tree.probs is None and len(tree.tokens) == 12  # 4 chain nodes, 2 siblings beside each
    assert max(depths(tree.parents)) == 4 and max(len(below) for below in children(tree.parents)) == 3
    below = children(tree.parents)
    node = -1
    for depth, token in enumerate(chain):
        kids = below[node + 1]
        assert [tree.tokens[kid] for kid in kids] == top_tokens(drafter, PROMPT + chain[:depth], 3)
        assert tree.tokens[kids[0]] == token  # the chain's node is its parent's best child
        assert all(below[kid + 1] == [] for kid in kids[1:])  # its siblings are leaves
        node = kids[0]
    small = propose(drafter, 4, max_nodes=5, branching=3)  # the 5 nodes of highest path score
    best = rerank(tree.tokens, tree.parents, tree.confidence, 5)
    assert (small.tokens, small.parents) == (best.tokens, best.parents) and len(small.tokens) == 5
