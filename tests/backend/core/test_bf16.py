"""bfloat16 targets: each row of a pass of T tokens is scored bit for bit as in a one-token pass (the fast
path's graphs and Hugging Face's forward), so every registered drafter's greedy output equals plain bf16
decoding of the same engine: single sequences, batches and token trees, eager and compiled; sampling
keeps the target's distribution. bf16 logits tie at its resolution, so any width-dependent rounding
shows up here as a changed token."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from backend.core.batch import BatchEngine
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.fast_forward import FastForward
from backend.core.kv import cached_forward, new_cache
from backend.core.models import LoadedModel
from backend.core.row_attention import folded, plain
from backend.core.target_passes import target_passes
from backend.core.verify import SamplingParams
from backend.drafters import TREE_DRAFTERS
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.sampling import (
    REGISTRY_SAMPLES,
    SIGNIFICANCE,
    exact_joint,
    goodness_of_fit,
    sampled_joint,
    sampling_model,
)
from tests.helpers.scripted import PROMPT
from tests.helpers.tiny import tiny_llama
from tests.helpers.trees import BRANCHING

COMPILE = ["off", pytest.param("on", marks=pytest.mark.slow)]
WIDTHS = (2, 3, 4, 8, 9, 16)
CONTINUATION = [20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35]
# heads of 64 dims, 3 query heads per KV head, as SmolLM2's: there, on an AVX2 CPU, the plain attention
# kernel scores some rows of a T-token pass differently from their one-token pass (at 16-dim heads it does not)
HEADS = {"hidden": 192, "heads": 3, "kv_heads": 1}
PROMPTS = [PROMPT, BRANCHING * 2]
MAX_NEW = 24


def in_bf16(model: LoadedModel) -> LoadedModel:
    return replace(model, model=model.model.to(torch.bfloat16), dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def tiny16() -> LoadedModel:
    return in_bf16(tiny_llama(seed=0, **HEADS))


@pytest.fixture(scope="module")
def other16() -> LoadedModel:
    return in_bf16(tiny_llama(seed=1, layers=2, **HEADS))


def test_folded_attention_gives_each_row_the_bits_of_its_one_token_pass():
    generator = torch.Generator().manual_seed(0)
    keys, values = (torch.randn(1, 2, 80, 16, generator=generator).bfloat16() for _ in "kv")
    q = torch.randn(1, 4, 9, 16, generator=generator).bfloat16()
    slots = torch.arange(80)

    def seen(start: int, width: int) -> torch.Tensor:
        return (slots[None, :] < start + 1 + torch.arange(width)[:, None])[None, None]  # [1, 1, T, S]

    together = folded(q, keys, values, seen(60, 9))[0]  # [H, T, hd]
    for t in range(9):
        assert torch.equal(together[:, t], folded(q[:, :, t : t + 1], keys, values, seen(60 + t, 1))[0, :, 0])
    torch.testing.assert_close(together, plain(q, keys, values, seen(60, 9))[0], atol=2e-2, rtol=2e-2)


def test_fp32_keeps_the_plain_kernel_and_bf16_folds_its_rows(tiny16):
    assert FastForward(tiny_llama(seed=0).model, compiled=False).module.layers[0].attend is plain
    assert FastForward(tiny16.model, compiled=False).module.layers[0].attend is folded


@pytest.mark.parametrize("compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"])
def test_every_row_of_a_fast_pass_equals_its_one_token_pass(tiny16, compiled):
    """One-token passes against verify passes (every width), and a batch of two rows against one; compiled,
    the graphs the engines below share."""
    fast = target_passes(tiny16.model, "on").fast if compiled else FastForward(tiny16.model, compiled=False)
    cache = fast.new_cache(64)
    fast.forward(torch.tensor([PROMPT]), cache)
    alone = [fast.forward(torch.tensor([[token]]), cache) for token in CONTINUATION]
    for width in WIDTHS:
        for batch in (1, 2):
            cache = fast.new_cache(64, batch)
            fast.forward(torch.tensor([PROMPT] * batch), cache)
            together = fast.forward(torch.tensor([CONTINUATION[:width]] * batch), cache)
            for t in range(width):
                assert torch.equal(together.logits[-1, t], alone[t].logits[0, 0]), f"T={width} B={batch} row {t}"
                assert torch.equal(together.hidden[-1][-1, t], alone[t].hidden[-1][0, 0])


def test_every_row_of_a_hugging_face_pass_equals_its_one_token_pass(tiny16):
    cache = new_cache(tiny16.model)
    cached_forward(tiny16.model, PROMPT, cache)
    alone = [cached_forward(tiny16.model, [token], cache).logits[0] for token in CONTINUATION[:9]]
    for width in (2, 4, 9):
        cache = new_cache(tiny16.model)
        cached_forward(tiny16.model, PROMPT, cache)
        together = cached_forward(tiny16.model, CONTINUATION[:width], cache).logits
        assert all(torch.equal(together[t], alone[t]) for t in range(width)), f"T={width}"
    assert tiny16.model.config._attn_implementation == "sdpa"  # put back after each pass


def plain_outputs(engine: SpeculativeEngine, prompts: list[list[int]], max_new: int = MAX_NEW) -> list[list[int]]:
    return [engine.generate(p, None, GenerationSettings(max_new, draft_len=0)).run().output_ids for p in prompts]


@pytest.fixture(scope="module", params=COMPILE, ids=["eager", "compiled"])
def engine16(tiny16, request) -> SpeculativeEngine:
    return SpeculativeEngine(tiny16.model, set(), 512, compile=request.param)


@pytest.fixture(scope="module")
def plain16(engine16) -> list[list[int]]:
    return plain_outputs(engine16, PROMPTS)


@pytest.mark.parametrize("name", EVERY_DRAFTER)
def test_every_drafter_is_lossless_in_bf16(tiny16, other16, engine16, plain16, name):
    """Single sequences at D = 5, then the same prompts as one ragged batch at D = 3."""
    drafter = registered_drafter(name, tiny16, other16, exit_layer=3)
    singles = [engine16.generate(p, drafter, GenerationSettings(MAX_NEW, draft_len=5)).run() for p in PROMPTS]
    assert [run.output_ids for run in singles] == plain16
    assert any(step.drafted for run in singles for step in run.steps), f"{name} never drafted"
    batched = BatchEngine(engine16).generate(PROMPTS, drafter, GenerationSettings(MAX_NEW, draft_len=3))
    assert [row.output_ids for row in batched.rows] == plain16


@pytest.mark.parametrize("name", TREE_DRAFTERS)
def test_token_trees_are_lossless_in_bf16(tiny16, other16, engine16, plain16, name):
    drafter = registered_drafter(name, tiny16, other16, exit_layer=3)
    settings = GenerationSettings(MAX_NEW, draft_len=4, tree_budget=8, tree_topk=3)
    singles = [engine16.generate(p, drafter, settings).run() for p in PROMPTS]
    assert [run.output_ids for run in singles] == plain16
    assert any(step.parents for run in singles for step in run.steps), f"{name} never drafted a tree"
    batched = BatchEngine(engine16).generate(PROMPTS, drafter, settings)
    assert [row.output_ids for row in batched.rows] == plain16


@pytest.mark.parametrize("name", ["ngram", "eagle3"])
def test_sampling_keeps_the_bf16_targets_distribution(name):
    target, draft = in_bf16(sampling_model()), in_bf16(sampling_model(seed=4, layers=1))
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, registered_drafter(name, target, draft), sampling, 3, samples=REGISTRY_SAMPLES)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE
