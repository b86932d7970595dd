"""The engine on tiny random Llamas: greedy losslessness for every drafter, every acceptance count,
hidden-state plumbing, stop conditions and bad input."""

from __future__ import annotations

import pytest
import torch

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.core.kv import cached_forward, new_cache, trim_cache
from backend.core.verify import SamplingParams
from backend.drafters import DrafterOptions, build_drafter
from backend.drafters.draft_model import DraftModelDrafter
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.scripted import PROMPT, ScriptedDrafter, hf_greedy


def engine_for(model) -> SpeculativeEngine:
    return SpeculativeEngine(model.model, model.eos_token_ids, model.facts.max_context)


def run(model, drafter, draft_len, max_new_tokens=40, prompt=PROMPT, **settings):
    settings = GenerationSettings(max_new_tokens=max_new_tokens, draft_len=draft_len, **settings)
    return engine_for(model).generate(prompt, drafter, settings).run()


def test_plain_engine_equals_hugging_face_greedy(tiny):
    assert run(tiny, None, 0).output_ids == hf_greedy(tiny, PROMPT, 40)


@pytest.fixture(scope="module")
def plain_ids(tiny) -> list[int]:
    """Plain greedy decoding of PROMPT (40 tokens)."""
    return run(tiny, None, 0).output_ids


@pytest.mark.parametrize("name", EVERY_DRAFTER)
@pytest.mark.parametrize("draft_len", [1, 3, 8, "auto"])
def test_greedy_output_equals_target_greedy_for_every_drafter(tiny, tiny_other, plain_ids, name, draft_len):
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    result = run(tiny, drafter, draft_len)
    assert result.output_ids == plain_ids
    assert sum(len(s.emitted) for s in result.steps) == len(result.output_ids)
    assert any(s.drafted for s in result.steps), f"{name} never drafted: the test would only see plain decoding"


@pytest.mark.parametrize("name", ["ngram", "suffix"])
def test_lookup_drafters_get_drafts_accepted_on_repetitive_text(tiny, name):
    """Random tiny models fall into loops, which lookup drafters must exploit: not a vacuous test."""
    result = run(tiny, build_drafter(name, tiny), 8, max_new_tokens=60)
    assert sum(step.accepted for step in result.steps) > 10
    assert len(result.steps) < 60


def test_a_draft_model_identical_to_the_target_is_always_accepted(tiny):
    drafter = DraftModelDrafter(tiny, tiny)
    result = run(tiny, drafter, 4, max_new_tokens=41)
    assert all(step.accepted == len(step.drafted) for step in result.steps)
    assert len(result.steps) == 9  # 8 steps of 4 drafts + bonus, then one last token
    assert result.output_ids == run(tiny, None, 0, max_new_tokens=41).output_ids


@pytest.mark.parametrize("draft_len", [1, 4, 6])
def test_cache_trimming_at_every_acceptance_count(tiny, draft_len):
    engine = SpeculativeEngine(tiny.model, eos_ids=set(), max_context=512)  # no early stop
    reference = engine.generate(PROMPT, None, GenerationSettings(100, draft_len=0)).run().output_ids
    counts = [a for _ in range(3) for a in range(draft_len + 1)]  # at most 84 tokens for D = 6
    drafter = ScriptedDrafter(reference, len(PROMPT), list(counts))
    result = engine.generate(PROMPT, drafter, GenerationSettings(100, draft_len=draft_len)).run()
    assert [step.accepted for step in result.steps][: len(counts)] == counts
    assert result.output_ids == reference


@pytest.mark.parametrize("sampling", [SamplingParams(), SamplingParams(temperature=1.0)], ids=["greedy", "T1"])
def test_replaying_a_recorded_run_reproduces_it(tiny, tiny_other, sampling):
    """Replay against a run's own output gives back its text; against a greedy run the drafts and
    acceptances of every step too (greedy acceptance and replay agree on the target's rollout)."""
    engine = engine_for(tiny)
    recorded = engine.generate(
        PROMPT, DraftModelDrafter(tiny, tiny_other), GenerationSettings(24, draft_len=3, sampling=sampling)
    ).run()
    replayed = engine.generate(
        PROMPT, DraftModelDrafter(tiny, tiny_other), GenerationSettings(24, draft_len=3), reference=recorded.output_ids
    ).run()
    assert replayed.output_ids == recorded.output_ids
    if sampling.greedy:
        assert [(s.drafted, s.accepted) for s in replayed.steps] == [(s.drafted, s.accepted) for s in recorded.steps]


def test_trim_cache_keeps_exactly_the_prefix(tiny):
    cache = new_cache(tiny.model)
    cached_forward(tiny.model, PROMPT, cache)
    trim_cache(cache, 6)
    assert cache.get_seq_length() == 6
    after_trim = cached_forward(tiny.model, [30], cache).logits[-1]
    fresh = new_cache(tiny.model)
    expected = cached_forward(tiny.model, [*PROMPT[:6], 30], fresh).logits[-1]
    assert torch.allclose(after_trim, expected, atol=1e-5)
    with pytest.raises(ValueError):
        trim_cache(cache, 50)


class HiddenRecorder:
    """A drafter that only records the hidden states the engine hands it."""

    name = "recorder"
    target_hidden_layers = (0, 2, 4)
    free_to_propose = True

    def __init__(self) -> None:
        self.rows: dict[int, list[torch.Tensor]] = {layer: [] for layer in self.target_hidden_layers}
        self.committed: list[int] = []

    def cost(self) -> DrafterCost:
        return DrafterCost(0.0, 1.0)

    def start(self, prompt, prompt_hidden):
        for layer, states in prompt_hidden.items():
            self.rows[layer].append(states)
        return self

    def propose(self, request: DraftRequest) -> Draft:
        return Draft([7, 8, 9][: request.max_tokens])

    def observe(self, outcome: StepOutcome) -> None:
        self.committed += outcome.committed
        for layer, states in outcome.hidden.items():
            assert states.shape[0] == len(outcome.committed)
            self.rows[layer].append(states)

    def close(self) -> None:
        pass


def test_hidden_states_of_committed_positions_match_a_fresh_forward(tiny):
    recorder = HiddenRecorder()
    result = run(tiny, recorder, 3, max_new_tokens=20)
    sequence = PROMPT + result.output_ids
    with torch.inference_mode():
        fresh = tiny.model(torch.tensor([sequence[:-1]]), output_hidden_states=True).hidden_states
    for layer in recorder.target_hidden_layers:
        got = torch.cat(recorder.rows[layer])  # [len(sequence) - 1, hidden]: row i predicted token i + 1
        assert got.shape[0] == len(sequence) - 1
        assert torch.allclose(got, fresh[layer][0], atol=1e-4)


def test_stops_at_eos_inside_accepted_drafts(tiny):
    reference = run(tiny, None, 0, max_new_tokens=12).output_ids
    engine = SpeculativeEngine(tiny.model, {reference[5]}, 512)
    first_eos = reference.index(reference[5])
    result = engine.generate(PROMPT, DraftModelDrafter(tiny, tiny), GenerationSettings(12, draft_len=8)).run()
    assert result.output_ids == reference[: first_eos + 1]
    assert result.finish_reason == "eos"


def test_stop_strings_and_length(tiny):
    reference = run(tiny, None, 0, max_new_tokens=30).output_ids
    decode = tiny.tokenizer.decode
    stop = decode(reference[6:8])
    settings = GenerationSettings(30, draft_len=4, stop_strings=(stop,))
    result = engine_for(tiny).generate(PROMPT, build_drafter("suffix", tiny), settings, decode=decode).run()
    assert stop in decode(result.output_ids) and stop not in decode(result.output_ids[:-1])
    assert result.finish_reason == "stop"
    assert run(tiny, build_drafter("ngram", tiny), 8, max_new_tokens=7).finish_reason == "length"


def test_generation_is_capped_at_the_context(tiny):
    engine = SpeculativeEngine(tiny.model, set(), max_context=len(PROMPT) + 5)
    result = engine.generate(PROMPT, build_drafter("ngram", tiny), GenerationSettings(100, draft_len=8)).run()
    assert len(result.output_ids) == 5 and result.finish_reason == "context"


class Silent:
    """A drafter that never proposes anything: every step is a plain step."""

    name = "silent"
    target_hidden_layers: tuple[int, ...] = ()
    free_to_propose = True

    def cost(self):
        return DrafterCost(0.0, 1.0)

    def start(self, prompt, prompt_hidden):
        return self

    def propose(self, request):
        return Draft([], stop_reason="no-match")

    def observe(self, outcome):
        pass

    def close(self):
        pass


def test_a_drafter_that_proposes_nothing_decodes_plainly(tiny):
    result = run(tiny, Silent(), 6)
    assert result.output_ids == run(tiny, None, 0).output_ids
    assert all(not step.drafted for step in result.steps)
    assert all(step.stop_reason == "no-match" for step in result.steps if step.draft_len > 0)


class Declining(Silent):
    """A costly drafter whose confidence stops every draft before its first token."""

    free_to_propose = False

    def __init__(self) -> None:
        self.calls = 0

    def propose(self, request):
        self.calls += 1
        return Draft([], stop_reason="low-confidence")


def test_auto_hears_that_a_costly_drafter_was_asked_though_it_drafted_nothing(tiny, monkeypatch):
    """Such a step paid for drafting: `auto` must not time it as a plain step (policy.StepObservation.asked)."""
    from backend.core.policy import AdaptiveDraftLength

    heard = []
    observe = AdaptiveDraftLength.observe

    def spy(self, step):
        heard.append(step)
        return observe(self, step)

    monkeypatch.setattr(AdaptiveDraftLength, "observe", spy)
    drafter = Declining()
    result = run(tiny, drafter, "auto")
    assert result.output_ids == run(tiny, None, 0).output_ids
    asked = [step for step in heard if step.asked]
    assert len(asked) == drafter.calls > 0
    assert all(step.verified == 0 for step in heard)


@pytest.mark.parametrize(
    ("prompt", "settings", "message"),
    [
        ([], {}, "empty"),
        (list(range(4, 64)) * 10, {}, "context"),
        (PROMPT, {"draft_len": -1}, "between 0 and"),
        (PROMPT, {"draft_len": 1000}, "between 0 and"),
        (PROMPT, {"draft_len": "lots"}, "integer"),
        (PROMPT, {"max_new_tokens": 0}, "at least 1"),
    ],
)
def test_bad_requests_raise_clear_errors(tiny, prompt, settings, message):
    with pytest.raises(SpecScopeError, match=message):
        engine_for(tiny).generate(prompt, build_drafter("ngram", tiny), GenerationSettings(**settings)).run()


def test_unknown_drafter_and_missing_draft_model(tiny):
    with pytest.raises(SpecScopeError, match="unknown drafter"):
        build_drafter("medusa-9000", tiny)
    with pytest.raises(SpecScopeError, match="--draft-model"):
        build_drafter("draft-model", tiny)
    with pytest.raises(SpecScopeError, match="exit layer"):
        build_drafter("layerskip", tiny, DrafterOptions(layerskip_exit_layer=4))
