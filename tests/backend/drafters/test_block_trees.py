"""DFlash and DSpark token trees on the tiny target, with the heads' distributions replaced by hand-written
tables so every node is known: DFlash's children come from their slot's top tokens whatever their parent,
DSpark's from their parent's Markov-corrected distribution, and DSpark's confidence threshold prunes
per path. The chain is the tree's first branch."""

from __future__ import annotations

import math

import pytest
import torch

from backend.core.tree_shape import children, depths, validate
from backend.drafters import dflash, dspark
from tests.helpers.trained import PROMPT, first_draft, reduced_d2t

D2T = reduced_d2t().tolist()  # entry i of the draft vocabulary is token D2T[i]


def log_probs(entries: dict[int, float]) -> torch.Tensor:
    """Logits [Vd] whose softmax puts these probabilities on these draft-vocabulary entries."""
    row = torch.full((len(D2T),), -1e9)
    for entry, prob in entries.items():
        row[entry] = math.log(prob)
    return row


def propose(drafter, max_tokens: int, max_nodes: int = 0, branching: int = 1):
    """A fresh session's first proposal on PROMPT (a tree where max_nodes > 0)."""
    return first_draft(drafter, drafter.target, PROMPT, max_tokens, max_nodes=max_nodes, branching=branching)


# DFlash's slots: 1 -> tokens 4 (.6) or 5 (.3); 2 -> 7 (.7) or 9 (.2); 3 -> 11 (.9) or 13 (.06); the rest of
# each slot's probability on token 63 (the tiny target's end of sequence, 1, is never drafted)
SLOTS = torch.stack(
    [log_probs({1: 0.6, 2: 0.3, 12: 0.1}), log_probs({3: 0.7, 4: 0.2, 12: 0.1}), log_probs({5: 0.9, 6: 0.06, 12: 0.04})]
)


@pytest.fixture
def block(tiny):
    head = dflash.new_head(tiny, {"block_size": 3}, d2t=reduced_d2t())
    head.logits = lambda hidden: SLOTS[: hidden.shape[0]]  # [n, Vd] whatever the states
    return dflash.DFlashDrafter(tiny, head)


def test_dflash_grows_the_best_paths_from_each_slots_top_tokens(block):
    draft = propose(block, 3, max_nodes=6, branching=2)
    # 4 .6, 4-7 .42, 4-7-11 .378, 5 .3, 5-7 .21, 5-7-11 .189 (4-9 .12 left out)
    assert draft.tokens == [4, 7, 11, 5, 7, 11] and draft.parents == [-1, 0, 1, -1, 3, 4]
    assert draft.probs is None and draft.confidence == pytest.approx([0.6, 0.7, 0.9, 0.3, 0.7, 0.9])
    assert propose(block, 3).tokens == [4, 7, 11]  # the chain is the first branch


def test_dflash_trees_stay_within_budget_depth_and_branching(block):
    draft = propose(block, 2, max_nodes=10, branching=2)
    validate(draft.parents)
    assert len(draft.tokens) == 6 and max(depths(draft.parents)) == 2  # 2 + 2 x 2: every node up to depth 2
    assert max(len(below) for below in children(draft.parents)) == 2
    assert draft.stop_reason is None
    assert propose(block, 5, max_nodes=3, branching=2).stop_reason == "block-size"


def test_dflash_stops_a_branch_at_the_end_of_sequence(block):
    block.eos_ids = {7}
    draft = propose(block, 3, max_nodes=6, branching=2)
    # 7 ends the sequence: 4 .6, 4-7 .42, 5 .3, 5-7 .21, 4-9 .12, 4-9-11 .108
    assert draft.tokens == [4, 7, 5, 7, 9, 11] and draft.parents == [-1, 0, -1, 2, 0, 4]


# DSpark's corrected distribution after each previous token (the anchor is PROMPT[-1] = 8)
AFTER = {8: log_probs({1: 0.6, 2: 0.4}), 4: log_probs({3: 0.7, 4: 0.3}), 5: log_probs({5: 0.9, 6: 0.1})}


def markov_table(tiny, confidence: dict[int, float], threshold: float) -> dspark.DSparkDrafter:
    """A DSpark drafter whose corrected logits are AFTER[previous token] and whose confidence for a slot is
    confidence.get(previous token, 0.9)."""
    head = dspark.new_head(tiny, {"block_size": 2}, d2t=reduced_d2t())
    head.markov = lambda previous: previous.float()[..., None]  # z [..., 1]: the previous token itself
    head.corrected = lambda logits, z: torch.stack([AFTER[int(token)] for token in z[..., 0]])  # [n, Vd]
    odds = {token: math.log(p / (1 - p)) for token, p in confidence.items()}
    head.confidence_logit = lambda hidden, z: torch.tensor([odds.get(int(token), math.log(9)) for token in z[..., 0]])
    return dspark.DSparkDrafter(tiny, head, threshold=threshold)


def test_dspark_children_come_from_their_parents_corrected_distribution(tiny):
    drafter = markov_table(tiny, {}, threshold=0.0)
    draft = propose(drafter, 2, max_nodes=5, branching=2)
    # 4 .6, 4-7 .42, 5 .4, 5-11 .36, 4-9 .18: below 4 the tokens 7 and 9, below 5 the tokens 11 and 13
    assert draft.tokens == [4, 7, 5, 11, 9] and draft.parents == [-1, 0, -1, 2, 0]
    assert propose(drafter, 2).tokens == [4, 7]  # the chain is the first branch


def test_dspark_confidence_prunes_per_path(tiny):
    # confidence .9 after 8 and 4, .5 after 5: the path through 5 falls to .45 < .6 before its children
    drafter = markov_table(tiny, {5: 0.5}, threshold=0.6)
    draft = propose(drafter, 2, max_nodes=6, branching=2)
    assert draft.tokens == [4, 7, 5, 9] and draft.parents == [-1, 0, -1, 0]
    assert draft.stop_reason is None  # the tree still reaches the block's depth
    everywhere = markov_table(tiny, {4: 0.5, 5: 0.5}, threshold=0.6)
    shallow = propose(everywhere, 2, max_nodes=6, branching=2)
    assert shallow.tokens == [4, 5] and shallow.stop_reason == "low-confidence"
