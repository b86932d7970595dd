"""A tree pass on a tiny Llama against brute force: every node's logits equal a fresh forward of the
prompt plus that node's root path, with SDPA and eager attention; after keeping a path, the cache and
the next pass equal a fresh prefill of prompt + path."""

import random

import pytest
import torch

from backend.core.kv import cached_forward, new_cache, tree_attention_mask
from backend.core.target_passes import EagerPasses
from backend.core.tree import TreeLayout
from backend.core.tree_shape import path_to
from tests.helpers.tiny import tiny_llama

PROMPT = [5, 9, 13, 22, 5, 9, 13, 40]  # the last token is x, the root of the tree


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def model(request):
    loaded = tiny_llama(seed=0)
    loaded.model.set_attn_implementation(request.param)
    return loaded.model


def random_tree(seed: int, size: int) -> tuple[list[int], list[int]]:
    rng = random.Random(seed)
    return [rng.randrange(4, 64) for _ in range(size)], [rng.randrange(-1, node) for node in range(size)]


def fresh_logits(model, tokens: list[int]) -> torch.Tensor:
    """The logits after the last of `tokens`, from an empty cache: [V]."""
    return cached_forward(model, tokens, new_cache(model)).logits[-1]


def tree_pass(model, tokens: list[int], parents: list[int]):
    passes = EagerPasses(model)
    cache = passes.new_cache(0)
    passes.prefill(PROMPT[:-1], cache, False)
    layout = TreeLayout.of(parents, model.device)
    return passes, cache, passes.forward([PROMPT[-1], *tokens], cache, False, tree=layout)


def test_the_mask_is_additive_with_the_cache_and_the_ancestors_open(model):
    layout = TreeLayout.of([-1, -1, 0], torch.device("cpu"))
    mask = tree_attention_mask(2, layout, torch.float32)  # [1, 1, 4, 6]
    lowest = torch.finfo(torch.float32).min
    assert mask.shape == (1, 1, 4, 6)
    assert (mask[0, 0, :, :2] == 0).all()  # every row sees the cached slots
    assert mask[0, 0, 3, 2:].tolist() == [0, 0, lowest, 0]  # node 2: root, its parent node 0, itself
    assert mask[0, 0, 2, 2:].tolist() == [0, lowest, 0, lowest]  # node 1: root and itself


@pytest.mark.parametrize("seed", range(3))
def test_every_node_of_a_random_tree_equals_a_fresh_forward_of_its_path(model, seed):
    tokens, parents = random_tree(seed, 12)
    _, _, result = tree_pass(model, tokens, parents)
    assert result.logits.shape[0] == len(tokens) + 1
    for row in range(len(tokens) + 1):
        path = [tokens[node] for node in path_to(parents, row - 1)]
        torch.testing.assert_close(result.logits[row], fresh_logits(model, PROMPT + path), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("seed", range(3))
def test_after_keeping_a_path_the_cache_equals_a_fresh_prefill(model, seed):
    tokens, parents = random_tree(seed + 10, 10)
    passes, cache, _ = tree_pass(model, tokens, parents)
    deepest = max(range(len(tokens)), key=lambda node: (len(path_to(parents, node)), node))  # a late branch
    path = path_to(parents, deepest)
    passes.keep_path(cache, len(PROMPT), tuple(path))
    kept = PROMPT + [tokens[node] for node in path]
    assert cache.get_seq_length() == len(kept)
    fresh = new_cache(model)
    cached_forward(model, kept, fresh)
    for layer, reference in zip(cache.layers, fresh.layers, strict=True):
        torch.testing.assert_close(layer.keys, reference.keys, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(layer.values, reference.values, atol=1e-5, rtol=1e-5)
    step = passes.forward([7, 8], cache, False).logits  # [2, V]: the next pass, a plain chain
    torch.testing.assert_close(step[-1], fresh_logits(model, [*kept, 7, 8]), atol=1e-4, rtol=1e-4)


def test_keeping_the_first_branch_is_a_plain_trim(model):
    tokens, parents = [6, 7, 8], [-1, 0, -1]
    passes, cache, _ = tree_pass(model, tokens, parents)
    passes.keep_path(cache, len(PROMPT), (0, 1))
    next_logits = passes.forward([9], cache, False).logits[-1]
    torch.testing.assert_close(next_logits, fresh_logits(model, [*PROMPT, 6, 7, 9]), atol=1e-4, rtol=1e-4)
