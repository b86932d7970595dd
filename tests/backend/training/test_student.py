"""The distilled draft model (backend/training/student.py): its shape and principal-direction
initialisation, its KL loss, and its folder: an ordinary Hugging Face model that the draft-model drafter
finds for its own target only and runs losslessly; plus the time budgets of training and distillation."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.drafters import build_drafter, eagle3, trained_folders
from backend.drafters.trained import TargetParts, TrainBatch
from backend.training import student
from backend.training.dataset import distil
from backend.training.loop import TrainReport, TrainSettings, _timed_validation_due, train
from tests.helpers.tiny import tiny_instructions, tiny_llama
from tests.helpers.trained import small_settings

SHAPE = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64}


def test_student_embedding_starts_as_the_targets_principal_projection(tiny):
    fresh = student.new_head(tiny, SHAPE)
    embedding = tiny.model.get_input_embeddings().weight.detach()  # [V, 64]
    projected = fresh.get_input_embeddings().weight.detach()  # [V, 32]
    assert projected.shape == (embedding.shape[0], 32) and fresh.config.tie_word_embeddings
    # mapped back to 64 dimensions it is the best rank-32 fit: its error is the discarded singular values
    _, singular, right = torch.linalg.svd(embedding, full_matrices=False)
    error = torch.linalg.matrix_norm(embedding - projected @ right[:32]) ** 2
    assert error == pytest.approx(float((singular[32:] ** 2).sum()), rel=1e-3)
    assert torch.linalg.matrix_rank(projected) == 32
    assert fresh.config.vocab_size == tiny.facts.vocab_size
    assert fresh.config.eos_token_id == tiny.model.config.eos_token_id


def test_student_shape_errors_are_clear(tiny):
    with pytest.raises(SpecScopeError, match="must split into num_heads even-sized heads"):
        student.new_head(tiny, {"hidden_size": 30, "num_heads": 4})


def test_kl_loss_is_zero_for_the_targets_own_distribution_and_positive_otherwise(tiny):
    parts = TargetParts.of(tiny)
    ids = torch.randint(4, 64, (2, 12))
    with torch.no_grad():
        states = tiny.model(input_ids=ids, output_hidden_states=True).hidden_states
    mask = torch.ones(2, 12, dtype=torch.bool)
    batch = TrainBatch(ids, mask, {parts.num_layers: states[parts.num_layers]})
    own, metrics = student.training_loss(tiny.model, parts, batch)  # the target as its own student
    assert abs(float(own.detach())) < 1e-5 and metrics["top1"] == 1.0
    other, _ = student.training_loss(student.new_head(tiny, SHAPE), parts, batch)
    assert float(other.detach()) > 0.01


def test_student_folder_is_an_ordinary_hf_model_found_for_its_target_only(tiny, distilled, tmp_path, monkeypatch):
    folder = tmp_path / "draft-model-tiny"
    train(student, tiny, student.new_head(tiny, SHAPE), *distilled, small_settings(20), folder)
    config = json.loads((folder / "config.json").read_text())
    assert config["specscope_drafter"]["kind"] == "draft-model"
    assert config["specscope_drafter"]["target"]["fingerprint"] == tiny.fingerprint
    assert (folder / "tokenizer.json").is_file()
    plain = AutoModelForCausalLM.from_pretrained(folder)  # no SpecScope code needed to read it
    assert plain.config.hidden_size == 32 and next(plain.parameters()).dtype == torch.float16

    assert trained_folders(tiny, tmp_path) == {"draft-model": folder}
    assert trained_folders(tiny_llama(seed=1), tmp_path) == {}
    monkeypatch.setenv("SPECSCOPE_DRAFTERS", str(tmp_path))
    drafter = build_drafter("draft-model", tiny)  # no --draft-model: the student distilled for this target
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, 512)
    prompt = [5, 9, 13, 22, 5, 9, 13, 40]
    expected = engine.generate(prompt, None, GenerationSettings(24, draft_len=0)).run().output_ids
    assert engine.generate(prompt, drafter, GenerationSettings(24, draft_len=3)).run().output_ids == expected
    monkeypatch.setenv("SPECSCOPE_DRAFTERS", str(tmp_path / "nothing"))
    with pytest.raises(SpecScopeError, match="needs a draft model.*--kind draft-model"):
        build_drafter("draft-model", tiny)


def test_a_time_budget_ends_training_early_and_still_validates_and_saves(tiny, distilled, tmp_path):
    settings = TrainSettings(
        tokens=10**9,
        window=32,
        rows=4,
        warmup_steps=2,
        validate_every=10**6,
        validation_prompts=1,
        validation_new_tokens=8,
        minutes=0.05,
        timed_validations=2,
    )
    eagle3_data = distil(
        tiny, tiny_instructions(64), eagle3.training_layers(tiny), "train", 24, cache_root=tmp_path / "cache"
    )
    report = train(
        eagle3, tiny, eagle3.new_head(tiny), eagle3_data, eagle3_data, distilled[2], settings, tmp_path / "out"
    )
    assert 0 < report.steps < settings.steps and report.seconds >= 3.0
    assert report.validation and report.validation[-1]["step"] == report.steps
    assert (tmp_path / "out" / "model.safetensors").is_file()


def test_distillation_stops_at_its_time_budget_and_resumes(tiny, tmp_path):
    instructions, layers = tiny_instructions(80), student.training_layers(tiny)
    stopped = distil(tiny, instructions, layers, "train", 4, cache_root=tmp_path, minutes=0)
    assert stopped.shards() == [] and stopped.tokens() == 0
    resumed = distil(tiny, instructions, layers, "train", 4, cache_root=tmp_path)
    assert resumed.shards() and resumed.tokens() > 0


def test_timed_validations_fall_at_each_fraction_of_the_budget():
    settings = TrainSettings(minutes=1.0, timed_validations=4)  # every 15 s
    report = TrainReport(10, 14.0, validation=[{"seconds": 0.5}])
    assert not _timed_validation_due(report, settings, 14.9)
    assert _timed_validation_due(report, settings, 15.1)
    report.validation.append({"seconds": 15.1})
    assert not _timed_validation_due(report, settings, 29.0) and _timed_validation_due(report, settings, 31.0)
    assert not _timed_validation_due(report, TrainSettings(), 1e6)  # no budget: by steps only
