"""The registry's `trees` flag is honest: every drafter that declares trees gives plain greedy's output
token for token with a tree budget and really branches on text with several continuations; a drafter
that builds no trees, asked for one, proposes chains and stays lossless."""

from __future__ import annotations

import pytest

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.drafters import REGISTRY, TREE_DRAFTERS
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.scripted import ScriptedDrafter
from tests.helpers.trees import BRANCHING

PROMPT = BRANCHING * 2


def decode(model, drafter, **settings):
    engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context)
    return engine.generate(PROMPT, drafter, GenerationSettings(max_new_tokens=40, **settings)).run()


@pytest.mark.parametrize("name", [name for name in EVERY_DRAFTER if REGISTRY[name].trees])
def test_a_tree_budget_is_lossless_and_tree_drafters_branch(tiny, tiny_other, name):
    plain = decode(tiny, None, draft_len=0)
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    result = decode(tiny, drafter, draft_len=4, tree_budget=8, tree_topk=3)
    assert result.output_ids == plain.output_ids
    branched = [step for step in result.steps if step.parents is not None]
    assert branched, f"{name} declares trees but never branched"
    assert all(len(step.drafted) <= 8 and len(step.accepted_path) == step.accepted for step in branched)


def test_a_drafter_without_trees_asked_for_one_proposes_chains(tiny):
    plain = decode(tiny, None, draft_len=0)
    counts = [4, 0, 2, 1, 3] * 6
    chains = ScriptedDrafter(plain.output_ids, len(PROMPT), list(counts))  # no tree builder: it ignores max_nodes
    result = decode(tiny, chains, draft_len=4, tree_budget=8, tree_topk=3)
    assert result.output_ids == plain.output_ids
    drafting = [step for step in result.steps if step.drafted]
    assert drafting and all(step.parents is None for step in result.steps)
    assert [step.accepted for step in drafting] == counts[: len(drafting)]


def test_the_lookup_drafters_declare_trees():
    assert {"ngram", "suffix"} <= set(TREE_DRAFTERS)


def test_the_autoregressive_and_block_drafters_declare_trees():
    assert {"draft-model", "layerskip", "dflash", "dspark"} <= set(TREE_DRAFTERS)
