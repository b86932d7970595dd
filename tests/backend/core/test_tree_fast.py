"""Token trees on the fast path (static KV cache, compiled graphs) of a tiny Llama: every node of a tree
pass equals a fresh forward of its root path, a kept path leaves the static cache equal to a fresh
prefill, rows of a batch may be trees of different shapes, and the compiled engine decodes n-gram
trees (single and batched) exactly as plain decoding and as the eager forward."""

from __future__ import annotations

import random

import pytest
import torch

from backend.core.batch import BatchEngine
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.fast_forward import FastForward
from backend.core.kv import cached_forward, new_cache
from backend.core.tree import TreeLayout, Visibility
from backend.core.tree_shape import path_to
from backend.drafters import build_drafter
from tests.helpers.scripted import PROMPT as REPEATS
from tests.helpers.trees import BRANCHING, later_sibling_accepted

pytestmark = pytest.mark.slow  # compiles the target's graphs: `make test-fast` leaves it out

PROMPT = [5, 9, 13, 22, 5, 9, 13, 40]  # the last token is x, the root of the tree


def random_tree(seed: int, size: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    return [rng.randrange(4, 64) for _ in range(size)], [rng.randrange(-1, node) for node in range(size)]


def fresh(model, tokens: list[int]):
    """A fresh forward of `tokens` from an empty cache: (logits [T, V], Hugging Face's cache)."""
    cache = new_cache(model)
    return cached_forward(model, tokens, cache).logits, cache


def tree_pass(fast: FastForward, tokens: list[int], parents: list[int]):
    cache = fast.new_cache(64)
    fast.forward(torch.tensor([PROMPT[:-1]]), cache)
    seen = Visibility.of([TreeLayout.of(parents, fast.device)], len(tokens) + 1, fast.device)
    return cache, fast.forward(torch.tensor([[PROMPT[-1], *tokens]]), cache, seen=seen)


def test_a_chains_visibility_is_the_causal_triangle_and_a_trees_its_ancestors():
    seen = Visibility.of([None, TreeLayout.of([-1, -1, 0], torch.device("cpu"))], 5, torch.device("cpu"))
    assert seen.offsets.tolist() == [[0, 1, 2, 3, 4], [0, 1, 1, 2, 4]]  # the padding keeps its own offset
    assert seen.among[0].equal(torch.ones(5, 5, dtype=torch.bool).tril())
    assert seen.among[1, 3].tolist() == [True, True, False, True, False]  # node 2: root, node 0, itself
    assert seen.among[1, 4].tolist() == [False, False, False, False, True]  # padding sees itself only


@pytest.mark.parametrize("compiled", [False, True], ids=["uncompiled", "compiled"])
@pytest.mark.parametrize("seed", range(2))
def test_every_node_of_a_fast_tree_pass_equals_a_fresh_forward_of_its_path(tiny, compiled, seed):
    tokens, parents = random_tree(seed, 12)
    _, result = tree_pass(FastForward(tiny.model, compiled), tokens, parents)
    for row in range(len(tokens) + 1):
        path = [tokens[node] for node in path_to(parents, row - 1)]
        expected = fresh(tiny.model, PROMPT + path)[0][-1]
        torch.testing.assert_close(result.logits[0, row], expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_after_keeping_a_path_the_static_cache_equals_a_fresh_prefill(tiny, seed):
    fast = FastForward(tiny.model, compiled=False)
    tokens, parents = random_tree(seed + 10, 10)
    cache, _ = tree_pass(fast, tokens, parents)
    deepest = max(range(len(tokens)), key=lambda node: (len(path_to(parents, node)), node))  # a late branch
    path = path_to(parents, deepest)
    cache.keep_slots(torch.tensor([len(PROMPT) - 1]), [[0, *(node + 1 for node in path)]])
    kept = PROMPT + [tokens[node] for node in path]
    assert cache.get_seq_length() == len(kept)
    _, reference = fresh(tiny.model, kept)
    for layer, theirs in enumerate(reference.layers):
        torch.testing.assert_close(cache.keys[layer][:, :, : len(kept)], theirs.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(cache.values[layer][:, :, : len(kept)], theirs.values, atol=1e-5, rtol=1e-5)
    step = fast.forward(torch.tensor([[7, 8]]), cache).logits[0, -1]  # the next pass, a plain chain
    torch.testing.assert_close(step, fresh(tiny.model, [*kept, 7, 8])[0][-1], atol=1e-4, rtol=1e-4)


def compiled_engine(model) -> SpeculativeEngine:
    return SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context, compile="on")


@pytest.mark.parametrize(("budget", "topk", "draft_len"), [(8, 4, 4), (16, 2, "auto"), (32, 4, 8)])
def test_compiled_ngram_trees_equal_plain_greedy_and_the_eager_forward(tiny, budget, topk, draft_len):
    settings = GenerationSettings(60, draft_len=draft_len, tree_budget=budget, tree_topk=topk)
    plain = compiled_engine(tiny).generate(BRANCHING * 2, None, GenerationSettings(60, draft_len=0)).run()
    result = compiled_engine(tiny).generate(BRANCHING * 2, build_drafter("ngram", tiny), settings).run()
    eager = SpeculativeEngine(tiny.model, tiny.eos_token_ids, tiny.facts.max_context, compile="off")
    assert result.output_ids == plain.output_ids
    assert result.output_ids == eager.generate(BRANCHING * 2, build_drafter("ngram", tiny), settings).run().output_ids
    if draft_len == "auto":  # auto may keep to chains (its choices follow measured step times), but it drafts
        assert any(step.drafted for step in result.steps)
    else:
        assert any(step.parents for step in result.steps)


def test_a_compiled_tree_step_can_keep_a_later_sibling(tiny):
    settings = GenerationSettings(60, draft_len=4, tree_budget=8)
    result = compiled_engine(tiny).generate(BRANCHING * 2, build_drafter("ngram", tiny), settings).run()
    assert any(step.parents and later_sibling_accepted(step) for step in result.steps)


@pytest.mark.parametrize("name", ["ngram", "suffix"])
def test_compiled_batches_of_tree_rows_equal_their_single_sequence_output(tiny, name):
    engine = compiled_engine(tiny)
    prompts = [BRANCHING * 2, REPEATS, BRANCHING[3:] + [9, 4, 5, 6]]
    expected = [engine.generate(p, None, GenerationSettings(40, draft_len=0)).run().output_ids for p in prompts]
    settings = GenerationSettings(40, draft_len=4, tree_budget=8, tree_topk=3)
    result = BatchEngine(engine).generate(prompts, build_drafter(name, tiny), settings)
    assert [row.output_ids for row in result.rows] == expected
    assert any(step.parents and step.accepted for row in result.rows for step in row.steps)
