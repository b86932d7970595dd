"""The fast path (static KV cache, compiled graphs) on tiny random Llamas: the same logits and hidden
states as Hugging Face's forward through rollbacks; every drafter lossless on the compiled engine,
greedy (single and batched) and sampling (the chi-square test). Graphs are compiled once per model
and test session (target_passes shares them between engines)."""

from __future__ import annotations

import pytest
import torch

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.core.fast_forward import FastForward
from backend.core.kv import cached_forward, new_cache, trim_cache
from backend.core.static_kv import StaticKV
from backend.core.target_passes import CompiledPasses, compile_mode, prepare, resolve_compile
from backend.core.verify import SamplingParams
from backend.drafters.draft_model import DraftModelDrafter
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.sampling import (
    REGISTRY_SAMPLES,
    SETTINGS,
    SIGNIFICANCE,
    accept_all,
    exact_joint,
    goodness_of_fit,
    sampled_joint,
)
from tests.helpers.scripted import PROMPT, ScriptedDrafter, hf_greedy
from tests.helpers.tiny import tiny_llama

pytestmark = pytest.mark.slow  # compiles the target's graphs: `make test-fast` leaves it out


def generate(model, drafter, draft_len, max_new_tokens: int = 40, compile: str = "on", prompt=PROMPT):
    engine = SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context, compile)
    return engine.generate(prompt, drafter, GenerationSettings(max_new_tokens, draft_len=draft_len)).run()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_fast_forward_equals_hugging_face_through_rollbacks(tiny, compiled):
    fast = FastForward(tiny.model, compiled)
    cache = fast.new_cache(64)
    reference = new_cache(tiny.model)

    def both(tokens: list[int]):
        ours = fast.forward(torch.tensor([tokens]), cache)
        theirs = cached_forward(tiny.model, tokens, reference, want_hidden=True)
        torch.testing.assert_close(ours.logits[0], theirs.logits, atol=2e-5, rtol=1e-4)
        for index, (mine, hf) in enumerate(zip(ours.hidden, theirs.hidden, strict=True)):
            torch.testing.assert_close(mine[0], hf, atol=2e-5, rtol=1e-4, msg=f"hidden state {index}")

    both(PROMPT)  # prefill, 15 tokens
    both([20])  # one token
    both([21, 22, 23, 24])  # a verify pass ...
    cache.keep(len(PROMPT) + 2)  # ... of which one draft was kept
    trim_cache(reference, len(PROMPT) + 2)
    both([30, 31, 32])
    assert cache.get_seq_length() == reference.get_seq_length() == len(PROMPT) + 5


def test_the_static_cache_rolls_back_by_length_and_refuses_to_overflow():
    cache = StaticKV.allocate(
        layers=2, batch=3, kv_heads=1, capacity=5, head_dim=4, dtype=torch.float32, device=torch.device("cpu")
    )
    assert cache.capacity == 128  # rounded up so similar requests share shapes
    cache.lengths = torch.tensor([10, 20, 30])
    cache.keep(torch.tensor([8, 20, 1]))
    assert cache.lengths.tolist() == [8, 20, 1]
    with pytest.raises(ValueError, match="cannot keep"):
        cache.keep(9)  # more than row 0 holds (8)
    cache.select_rows([2, 0])
    assert cache.lengths.tolist() == [1, 8] and cache.keys[0].shape[0] == 2


def test_compiled_plain_greedy_equals_hugging_face_generate(tiny):
    assert generate(tiny, None, 0).output_ids == hf_greedy(tiny, PROMPT, 40)


@pytest.fixture(scope="module")
def plain_ids(tiny) -> list[int]:
    """Plain greedy decoding of PROMPT on the eager engine (Hugging Face's forward)."""
    return generate(tiny, None, 0, compile="off").output_ids


@pytest.mark.parametrize("name", EVERY_DRAFTER)
@pytest.mark.parametrize("draft_len", [1, 3, 8, "auto"])
def test_every_drafter_is_lossless_on_the_compiled_engine(tiny, tiny_other, plain_ids, name, draft_len):
    result = generate(tiny, registered_drafter(name, tiny, tiny_other, exit_layer=3), draft_len)
    assert result.output_ids == plain_ids
    assert sum(len(step.emitted) for step in result.steps) == len(result.output_ids)
    assert any(step.drafted for step in result.steps), f"{name} never drafted"


@pytest.mark.parametrize("draft_len", [1, 4, 6])
def test_every_acceptance_count_rolls_the_static_cache_back_correctly(tiny, draft_len):
    reference = generate(tiny, None, 0, max_new_tokens=60).output_ids
    counts = [(i * 5) % (draft_len + 1) for i in range(40)]  # 0..D in turn
    result = generate(tiny, ScriptedDrafter(reference, len(PROMPT), list(counts)), draft_len, max_new_tokens=60)
    assert result.output_ids == reference
    assert [step.accepted for step in result.steps[:10]] == counts[:10]


def test_a_draft_model_equal_to_the_target_is_always_accepted(tiny):
    result = generate(tiny, DraftModelDrafter(tiny, tiny), 4, max_new_tokens=41)
    assert all(step.accepted == len(step.drafted) for step in result.steps)
    assert result.output_ids == generate(tiny, None, 0, max_new_tokens=41).output_ids


@pytest.mark.parametrize("sampling", SETTINGS, ids=["T1", "T0.7-topk6-topp0.9"])
def test_sampling_on_the_compiled_engine_matches_the_target(pair, sampling):
    target, draft = pair
    counts = sampled_joint(target, DraftModelDrafter(target, draft), sampling, 3, "on", REGISTRY_SAMPLES, rows=1)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE


def test_the_sampling_check_still_catches_a_broken_rule_when_compiled(pair, monkeypatch):
    target, draft = pair
    monkeypatch.setattr("backend.core.verify.rejection_verify", accept_all)
    sampling = SamplingParams(temperature=1.0)
    counts = sampled_joint(target, DraftModelDrafter(target, draft), sampling, 3, "on", REGISTRY_SAMPLES, rows=1)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) < 1e-6


def test_a_compilation_that_fails_falls_back_to_eager_under_auto_only(monkeypatch):
    model = tiny_llama(seed=7, layers=1).model  # a model of its own: its compiled passes are not shared

    def broken(self, progress=None, batched=False):
        raise RuntimeError("C++ compile failed\nmore detail")

    monkeypatch.setattr(CompiledPasses, "warm_up", broken)
    said = []
    assert prepare(model, "auto", said.append) == "off"
    assert said[0] == "compiling failed (C++ compile failed); using the eager forward"
    with pytest.raises(SpecScopeError, match="compiling the target's passes failed: C\\+\\+ compile failed"):
        prepare(model, "on")
    assert prepare(model, "off") == "off"


def test_compile_choices_resolve_per_model(tiny, monkeypatch):
    assert compile_mode(tiny.model, "auto") == "on" and compile_mode(tiny.model, "off") == "off"
    monkeypatch.setattr("backend.core.target_passes.compiler_reason", lambda device: "no C++ compiler")
    assert resolve_compile(tiny.model, "auto") == ("off", "no C++ compiler")
    with pytest.raises(SpecScopeError, match="--compile on is not possible for this target: no C"):
        resolve_compile(tiny.model, "on")
    with pytest.raises(SpecScopeError, match="unknown compile choice"):
        resolve_compile(tiny.model, "fast")
