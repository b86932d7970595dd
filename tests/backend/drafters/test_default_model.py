"""Losslessness on the real embedded default model (SmolLM2-135M-Instruct): every drafter's greedy
output equals the target's own greedy output, and Hugging Face `generate`'s, token for token."""

from __future__ import annotations

import pytest
import torch

from backend.core.engine import GenerationSettings
from backend.drafters import DrafterOptions, build_drafter
from backend.lab.prompts import DEFAULT_SUITE, load_suite
from backend.lab.runner import Runner

pytestmark = pytest.mark.slow
MAX_NEW = 32  # per turn: three questions, one of them multi-turn
CATEGORIES = ["code_editing", "summarization", "multi_turn"]


@pytest.fixture(scope="module")
def runner(default_model):
    return Runner(default_model)


@pytest.fixture(scope="module")
def questions():
    suite = load_suite(DEFAULT_SUITE)
    return [next(q for q in suite if q.category == c) for c in CATEGORIES]


@pytest.fixture(scope="module")
def plain(runner, questions):
    return {q.question_id: runner.run(q.turns, None, GenerationSettings(MAX_NEW, draft_len=0)) for q in questions}


@torch.inference_mode()
def test_plain_engine_equals_hugging_face_generate(default_model, plain):
    for result in plain.values():
        for turn in result.turns:
            inputs = torch.tensor([turn.prompt_ids])
            hf = default_model.model.generate(
                inputs, attention_mask=torch.ones_like(inputs), max_new_tokens=MAX_NEW, do_sample=False, pad_token_id=2
            )
            assert hf[0, len(turn.prompt_ids) :].tolist() == turn.output_ids


# each lookup drafter with `auto` D and one fixed D, short and long between them (the tiny-model tests cover
# every drafter at D = 1, 3, 8 and auto; these check the real model's tokens and context)
@pytest.mark.parametrize(("name", "draft_len"), [("ngram", 2), ("ngram", "auto"), ("suffix", 8), ("suffix", "auto")])
def test_lookup_drafters_are_lossless(runner, questions, plain, name, draft_len):
    drafter = build_drafter(name, runner.target)
    for question in questions:
        result = runner.run(question.turns, drafter, GenerationSettings(MAX_NEW, draft_len=draft_len))
        assert result.output_ids == plain[question.question_id].output_ids


def test_code_editing_drafts_are_mostly_accepted_when_copying(runner, questions):
    """Not vacuous: on a code-editing prompt the lookup drafters do get long drafts accepted."""
    drafter = build_drafter("suffix", runner.target)
    result = runner.run(questions[0].turns, drafter, GenerationSettings(MAX_NEW, draft_len=8))
    assert max(step.accepted for step in result.steps) >= 4


def test_layerskip_is_lossless(runner, questions, plain):
    drafter = build_drafter("layerskip", runner.target, DrafterOptions(layerskip_exit_layer=20))
    result = runner.run(questions[1].turns, drafter, GenerationSettings(MAX_NEW, draft_len=3))
    assert result.output_ids == plain[questions[1].question_id].output_ids
    assert any(step.drafted for step in result.steps)


def test_draft_model_path_with_a_real_gguf_pair(runner, questions, plain):
    """The external-draft path end to end with a real model as the draft (the default drafting for
    itself, so every draft must be accepted)."""
    drafter = build_drafter("draft-model", runner.target, DrafterOptions(draft_model="default"))
    result = runner.run(questions[2].turns, drafter, GenerationSettings(MAX_NEW, draft_len=4))
    assert result.output_ids == plain[questions[2].question_id].output_ids
    drafting = [s for s in result.steps if s.drafted]
    assert drafting and all(s.accepted == len(s.drafted) for s in drafting)


SHIPPED_KINDS = ("eagle3", "mtp", "dflash", "dspark", "draft-model")


@pytest.mark.parametrize("kind", SHIPPED_KINDS)
def test_shipped_trained_drafters_are_found_for_the_default_and_lossless(runner, questions, plain, kind):
    """The weights under data/drafters/ are offered for the default target with no options, and lossless."""
    from backend.drafters import SHIPPED_DIR, trained_folders

    assert trained_folders(runner.target, SHIPPED_DIR)[kind].name == f"{kind}-smollm2"
    drafter = build_drafter(kind, runner.target)
    for question in questions[:2]:
        result = runner.run(question.turns, drafter, GenerationSettings(MAX_NEW, draft_len=4))
        assert result.output_ids == plain[question.question_id].output_ids
        assert any(step.drafted for step in result.steps), (kind, question.question_id)
