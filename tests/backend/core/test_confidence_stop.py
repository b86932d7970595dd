"""A confidence stop (`min_confidence`): a chain is cut before its first draft whose running product of the
drafter's own probabilities falls below the threshold. It only shortens drafts, so every drafter stays
lossless with it, greedy (single and batched) and sampling; chain drafters stop drafting there themselves."""

from __future__ import annotations

import itertools
import statistics

import pytest
import torch

from backend.core.batch import BatchEngine
from backend.core.drafter import Draft, confident_length
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.verify import SamplingParams
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.sampling import PROMPT as SAMPLING_PROMPT
from tests.helpers.sampling import REGISTRY_SAMPLES, SIGNIFICANCE, exact_joint, goodness_of_fit, sampled_joint

PROMPT = [1, 5, 9, 14, 3, 7]
PROMPTS = [PROMPT, [2, 4, 6, 8], [11, 3, 3, 5, 17, 19, 2]]
CHAIN_DRAFTERS = ["eagle3", "mtp", "draft-model", "layerskip"]
UNSCORED = ["ngram"]  # drafters that give no probabilities: a stop has nothing to test
SCORED = [name for name in EVERY_DRAFTER if name not in UNSCORED]


def test_the_stop_is_the_running_product_of_the_draft_probabilities():
    confidence = [0.9, 0.5, 0.9]  # running products 0.9, 0.45, 0.405
    assert confident_length(confidence, 0.0) == 3
    assert confident_length(confidence, 0.4) == 3
    assert confident_length(confidence, 0.42) == 2
    assert confident_length(confidence, 0.5) == 1
    assert confident_length(confidence, 0.95) == 0


def test_a_chain_is_cut_with_its_distributions_and_a_tree_is_left_alone():
    q = torch.softmax(torch.randn(3, 10), dim=-1)  # [D, V]
    chain = Draft([4, 2, 7], q, [0.9, 0.5, 0.9], evidence="n3")
    cut = chain.within_confidence(0.42)
    assert cut.tokens == [4, 2] and torch.equal(cut.probs, q[:2]) and cut.confidence == [0.9, 0.5]
    assert cut.stop_reason == "low-confidence" and cut.evidence == "n3"
    assert chain.within_confidence(0.4) is chain and chain.within_confidence(0.0) is chain
    tree = Draft([4, 2, 7], confidence=[0.9, 0.1, 0.1], parents=[-1, 0, 0])
    assert tree.within_confidence(0.5) is tree
    assert Draft([4, 2]).within_confidence(0.5).tokens == [4, 2]  # no probabilities: nothing to test


def _steady(engine: SpeculativeEngine) -> SpeculativeEngine:
    """The engine timed by a clock that advances 1 ms per reading: every step costs the same whatever it verified,
    so what `auto` drafts follows the drafts' acceptance alone, not the load on the machine."""
    engine.clock = itertools.count(0.0, 0.001).__next__
    return engine


def _threshold(target, drafter, draft_len, prompt: list[int] = PROMPT) -> float:
    """The median first-draft probability of this drafter on `prompt`: a stop that cuts some steps, not all."""
    engine = _steady(SpeculativeEngine(target.model, set(), 64))
    steps = engine.generate(prompt, drafter, GenerationSettings(40, draft_len=draft_len)).run().steps
    return statistics.median([step.draft_probs[0] for step in steps if step.draft_probs])


@pytest.mark.parametrize("name", SCORED)
@pytest.mark.parametrize("draft_len", [3, "auto"])
def test_greedy_output_equals_target_greedy_with_a_confidence_stop(tiny, tiny_other, name, draft_len):
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    engine = _steady(SpeculativeEngine(tiny.model, tiny.eos_token_ids, tiny.facts.max_context))
    stop = _threshold(tiny, drafter, draft_len)
    settings = GenerationSettings(40, draft_len=draft_len, min_confidence=stop)
    result = engine.generate(PROMPT, drafter, settings).run()
    assert result.output_ids == engine.generate(PROMPT, None, GenerationSettings(40, draft_len=0)).run().output_ids
    chains = [step for step in result.steps if step.drafted]
    assert chains, "no chain was verified"
    for step in chains:  # every verified chain carries its probabilities and passed the stop
        assert step.draft_probs is not None and confident_length(step.draft_probs, stop) == len(step.drafted)


@pytest.mark.parametrize("name", UNSCORED)
@pytest.mark.parametrize("draft_len", [3, "auto"])
def test_a_drafter_without_probabilities_is_never_cut_by_a_confidence_stop(tiny, tiny_other, name, draft_len):
    """Its chains carry no probabilities, so even a stop that would cut almost any scored chain leaves them
    whole, and decoding stays lossless."""
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, tiny.facts.max_context)
    settings = GenerationSettings(40, draft_len=draft_len, min_confidence=0.99)
    result = engine.generate(PROMPT, registered_drafter(name, tiny, tiny_other), settings).run()
    assert result.output_ids == engine.generate(PROMPT, None, GenerationSettings(40, draft_len=0)).run().output_ids
    assert any(step.drafted for step in result.steps), "no chain was verified"
    assert all(step.draft_probs is None and step.stop_reason != "low-confidence" for step in result.steps)


@pytest.mark.parametrize("name", CHAIN_DRAFTERS)
def test_chain_drafters_stop_drafting_at_the_first_unconfident_token(tiny, tiny_other, name, monkeypatch):
    """Each raw chain ends at most one token past its confident prefix (the token that failed the test),
    and some steps are really cut: the stop saves the draft passes after it."""
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    stop = _threshold(tiny, drafter, 6)
    raw: list[Draft] = []
    original = Draft.within_confidence

    def spy(draft: Draft, threshold: float) -> Draft:
        raw.append(draft)
        return original(draft, threshold)

    monkeypatch.setattr(Draft, "within_confidence", spy)
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, tiny.facts.max_context)
    steps = engine.generate(PROMPT, drafter, GenerationSettings(40, draft_len=6, min_confidence=stop)).run().steps
    assert raw and all(len(d.tokens) <= confident_length(d.confidence, stop) + 1 for d in raw)
    assert any(step.stop_reason == "low-confidence" for step in steps)
    assert any(len(step.drafted) < 6 and step.stop_reason == "low-confidence" for step in steps)


@pytest.mark.parametrize("name", CHAIN_DRAFTERS)
def test_every_batched_row_equals_its_single_sequence_output_with_a_confidence_stop(tiny, tiny_other, name):
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    engine = SpeculativeEngine(tiny.model, set(), 512)
    stop = _threshold(tiny, drafter, 3)
    result = BatchEngine(engine).generate(PROMPTS, drafter, GenerationSettings(30, draft_len=3, min_confidence=stop))
    singles = [engine.generate(p, None, GenerationSettings(30, draft_len=0)).run().output_ids for p in PROMPTS]
    assert [row.output_ids for row in result.rows] == singles


@pytest.mark.parametrize("name", ["draft-model", "eagle3"])
def test_sampling_with_a_confidence_stop_samples_from_the_target(pair, name):
    target, draft = pair
    drafter = registered_drafter(name, target, draft)
    sampling = SamplingParams(temperature=1.0)
    stop = _threshold(target, drafter, 3, SAMPLING_PROMPT)
    counts = sampled_joint(target, drafter, sampling, 3, samples=REGISTRY_SAMPLES, min_confidence=stop)
    assert goodness_of_fit(counts, exact_joint(target, sampling)) > SIGNIFICANCE
