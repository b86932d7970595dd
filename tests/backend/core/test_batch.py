"""Batched decoding with ragged acceptance: every row equals its single-sequence greedy output, on the
eager path (masked slots over Hugging Face's cache) and the compiled one (per-row static lengths), for every
registered drafter with rows that stop early on EOS, and for every tree drafter with trees of different
shapes in one pass."""

from __future__ import annotations

from dataclasses import replace

import pytest

import backend.core.batch_cache
from backend.core.batch import BatchEngine
from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.verify import SamplingParams
from backend.drafters import TREE_DRAFTERS, build_drafter
from tests.helpers.drafters import EVERY_DRAFTER, registered_drafter
from tests.helpers.trees import BRANCHING

PROMPTS = [
    [5, 9, 13, 22, 5, 9, 13, 40, 41, 5, 9, 13],
    [7, 8],
    [30, 31, 32, 33, 34, 30, 31, 32, 33, 34, 30, 31, 32, 33, 34, 30, 31],
    [12],
    [50, 51, 50, 51, 50, 51, 52, 53],
]


def single_outputs(engine: SpeculativeEngine, max_new: int) -> list[list[int]]:
    return [engine.generate(p, None, GenerationSettings(max_new, draft_len=0)).run().output_ids for p in PROMPTS]


@pytest.fixture(scope="module", params=["off", pytest.param("on", marks=pytest.mark.slow)], ids=["eager", "compiled"])
def engine(tiny, request):
    return SpeculativeEngine(tiny.model, set(), 512, compile=request.param)


@pytest.fixture(scope="module")
def singles(engine) -> list[list[int]]:
    """Each prompt's plain single-sequence output (40 tokens), once per kind of pass."""
    return single_outputs(engine, 40)


# every drafter at D = 3 (rows accept different counts in one pass), plain decoding, and the two D policies
EVERY_ROW_CASES = [
    ("none", 0),
    *((name, 3) for name in EVERY_DRAFTER),
    ("ngram", "auto"),
    ("eagle3", "schedule:1=6/3=2"),
]


@pytest.mark.parametrize(("name", "draft_len"), EVERY_ROW_CASES)
def test_every_row_equals_its_single_sequence_output(tiny, tiny_other, engine, singles, name, draft_len):
    """Row 1 stops on an EOS token after 5 tokens while the others go on (the batch shrinks mid-run)."""
    eos = singles[1][4]
    expected = [ids[: ids.index(eos) + 1] if eos in ids else ids for ids in singles]
    stopping = SpeculativeEngine(tiny.model, {eos}, 512, compile=engine.compile)
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    result = BatchEngine(stopping).generate(PROMPTS, drafter, GenerationSettings(40, draft_len=draft_len))
    assert [row.output_ids for row in result.rows] == expected
    assert result.rows[1].finish_reason == "eos" and any(len(ids) == 40 for ids in expected)
    assert result.new_tokens == sum(map(len, expected)) and result.wall_s >= result.prefill_s > 0
    if name != "none":
        assert any(step.drafted for row in result.rows for step in row.steps), f"{name} never drafted"


def test_rows_accept_different_counts_in_the_same_step(tiny, engine):
    result = BatchEngine(engine).generate(PROMPTS, build_drafter("ngram", tiny), GenerationSettings(40, draft_len=6))
    per_step = list(zip(*[[step.accepted for step in row.steps] for row in result.rows], strict=False))
    assert any(len(set(counts)) > 1 for counts in per_step)  # ragged within one verification pass
    assert sum(step.accepted for row in result.rows for step in row.steps) > 20


def test_compaction_and_rows_that_finish_early(tiny, monkeypatch):
    monkeypatch.setattr(backend.core.batch_cache, "HOLES_BEFORE_COMPACTING", 1.0)  # compact after every step with holes
    plain = SpeculativeEngine(tiny.model, set(), 512)
    reference = single_outputs(plain, 30)
    eos = reference[1][4]  # row 1 stops early on this token; others may too
    engine = SpeculativeEngine(tiny.model, {eos}, 512)
    expected = [ids[: ids.index(eos) + 1] if eos in ids else ids for ids in reference]
    result = BatchEngine(engine).generate(PROMPTS, build_drafter("suffix", tiny), GenerationSettings(30, draft_len=4))
    assert [row.output_ids for row in result.rows] == expected
    assert result.rows[1].finish_reason == "eos" and len(result.rows[1].output_ids) < 30


def test_row_timings_give_ttft_and_tpot(tiny, engine):
    result = BatchEngine(engine).generate(PROMPTS[:2], None, GenerationSettings(10, draft_len=0))
    for row in result.rows:
        assert 0 < row.first_token_s <= row.last_token_s <= result.wall_s
        assert row.time_per_output_token == pytest.approx((row.last_token_s - row.first_token_s) / 9)


def test_prompts_of_similar_lengths_are_prefilled_together():
    from backend.core.batch_cache import PREFILL_TOKENS_PER_PASS, prefill_groups

    assert prefill_groups([11, 1, 16, 0, 7]) == [[3], [1], [4, 0], [2]]  # PROMPTS: 7 and 11 share a pass
    assert prefill_groups([40, 42, 41, 90, 44]) == [[0, 2, 1, 4], [3]]  # 90 would pad the others past a quarter
    long = PREFILL_TOKENS_PER_PASS // 2 + 1
    assert prefill_groups([long, long, 30, 30]) == [[2, 3], [0], [1]]  # two long prompts exceed one pass's tokens
    groups = prefill_groups([30] * 40)
    assert sorted(row for group in groups for row in group) == list(range(40))
    assert all(len(group) * 30 <= PREFILL_TOKENS_PER_PASS for group in groups) and len(groups) == 3


@pytest.mark.slow
def test_batched_rows_equal_single_sequences_on_the_default_model(default_model):
    from backend.lab.prompts import DEFAULT_SUITE, encode_conversation, load_suite

    engine = SpeculativeEngine(default_model.model, default_model.eos_token_ids, default_model.facts.max_context)
    questions = load_suite(DEFAULT_SUITE, categories=["code_editing", "qa", "rag", "math"], per_category=1)
    prompts = [encode_conversation(default_model.tokenizer, [q.turns[0]], []) for q in questions]
    single = [engine.generate(p, None, GenerationSettings(32, draft_len=0)).run().output_ids for p in prompts]
    for name, draft_len in (("none", 0), ("ngram", 4), ("suffix", "auto")):
        drafter = build_drafter(name, default_model)
        result = BatchEngine(engine).generate(prompts, drafter, GenerationSettings(32, draft_len=draft_len))
        assert [row.output_ids for row in result.rows] == single, (name, draft_len)


class RecordingDrafter:
    """Proposes fixed drafts and records, per row, the target hidden states the batch hands it."""

    name = "recording"
    target_hidden_layers = (0, 2, 4)
    free_to_propose = True

    def __init__(self) -> None:
        self.sessions: list[RecordingDrafter.Session] = []

    class Session:
        def __init__(self, prompt_hidden) -> None:
            self.rows = {layer: [states] for layer, states in prompt_hidden.items()}

        def propose(self, request):
            from backend.core.drafter import Draft

            return Draft([7, 8, 9][: request.max_tokens])

        def observe(self, outcome) -> None:
            for layer, states in outcome.hidden.items():
                assert states.shape[0] == len(outcome.committed)
                self.rows[layer].append(states)

        def close(self) -> None:
            pass

    def cost(self):
        from backend.core.drafter import DrafterCost

        return DrafterCost(0.0, 1.0)

    def start(self, prompt, prompt_hidden):
        self.sessions.append(self.Session(prompt_hidden))
        return self.sessions[-1]


def test_rows_receive_the_hidden_states_of_their_committed_positions(tiny, engine):
    import torch

    drafter = RecordingDrafter()
    prompts = [p for p in PROMPTS if len(p) > 1]
    result = BatchEngine(engine).generate(prompts, drafter, GenerationSettings(20, draft_len=3))
    for prompt, row, session in zip(prompts, result.rows, drafter.sessions, strict=True):
        sequence = prompt + row.output_ids
        with torch.inference_mode():
            fresh = tiny.model(torch.tensor([sequence[:-1]]), output_hidden_states=True).hidden_states
        for layer in drafter.target_hidden_layers:
            got = torch.cat(session.rows[layer])  # row i: the state that predicted sequence[i + 1]
            assert got.shape[0] == len(sequence) - 1
            assert torch.allclose(got, fresh[layer][0], atol=1e-4)


TREE_CASES = [*((name, 4, 8) for name in TREE_DRAFTERS), ("ngram", "auto", 16), ("suffix", "auto", 16)]


@pytest.mark.parametrize(("name", "draft_len", "budget"), TREE_CASES)
def test_tree_rows_of_different_shapes_equal_their_single_sequence_output(tiny, tiny_other, name, draft_len, budget):
    """Ragged trees (and chains, where a row's draft did not branch) in one pass: every row equals its
    plain single-sequence greedy output, and (at a fixed D) some pass held rows of different tree shapes, or
    (under auto) every row verified drafts."""
    engine = SpeculativeEngine(tiny.model, set(), 512)
    prompts = [BRANCHING * 2, *PROMPTS[:3], BRANCHING[3:] + [9, 4, 5, 6]]
    expected = [engine.generate(p, None, GenerationSettings(40, draft_len=0)).run().output_ids for p in prompts]
    settings = GenerationSettings(40, draft_len=draft_len, tree_budget=budget, tree_topk=3)
    drafter = registered_drafter(name, tiny, tiny_other, exit_layer=3)
    result = BatchEngine(engine).generate(prompts, drafter, settings)
    assert [row.output_ids for row in result.rows] == expected
    if draft_len == "auto":  # auto's choices follow measured step times, so which passes hold trees varies
        assert all(any(step.drafted for step in row.steps) for row in result.rows)  # each row's first draft is tried
    else:
        shapes = list(zip(*[[tuple(step.parents or ()) for step in row.steps] for row in result.rows], strict=False))
        assert any(len({shape for shape in shapes_in_pass if shape}) > 1 for shapes_in_pass in shapes)


@pytest.mark.parametrize("compile", ["off", pytest.param("on", marks=pytest.mark.slow)])
def test_tree_rows_sample_as_their_single_sequences(tiny, compile):
    """At temperature 1 each row draws from its own seed (settings.seed + row): the same tokens as that
    row decoded alone with the same tree settings, on either kind of pass."""
    engine = SpeculativeEngine(tiny.model, set(), 512, compile)
    prompts = [BRANCHING * 2, PROMPTS[2]]
    settings = GenerationSettings(30, draft_len=4, tree_budget=8, sampling=SamplingParams(temperature=1.0))
    batched = BatchEngine(engine).generate(prompts, build_drafter("ngram", tiny), settings)
    for row, prompt in enumerate(prompts):
        alone = engine.generate(prompt, build_drafter("ngram", tiny), replace(settings, seed=row)).run()
        assert batched.rows[row].output_ids == alone.output_ids
    assert any(step.parents for row in batched.rows for step in row.steps)


def test_tree_rows_survive_compaction(tiny, monkeypatch):
    """Tree steps leave holes (the branches not kept) between kept slots; compacting after every step
    keeps each row's output equal to its single-sequence output."""
    monkeypatch.setattr(backend.core.batch_cache, "HOLES_BEFORE_COMPACTING", 1.0)
    engine = SpeculativeEngine(tiny.model, set(), 512)
    prompts = [BRANCHING * 2, PROMPTS[0], BRANCHING[3:] + [9, 4, 5, 6]]
    expected = [engine.generate(p, None, GenerationSettings(30, draft_len=0)).run().output_ids for p in prompts]
    settings = GenerationSettings(30, draft_len=4, tree_budget=8, tree_topk=3)
    result = BatchEngine(engine).generate(prompts, build_drafter("ngram", tiny), settings)
    assert [row.output_ids for row in result.rows] == expected
    assert any(step.parents and step.accepted for row in result.rows for step in row.steps)
