"""The shared training loop on a tiny target: every kind trains (loss falls), validates through the
engine, checkpoints and resumes, and saves a folder its drafter loads losslessly; the model card says
what was measured; the `train` command runs end to end."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.errors import SpecScopeError
from backend.drafters import DrafterOptions, build_drafter, eagle3
from backend.drafters.trained import TargetParts, teacher_logits
from backend.training.card import training_runs, write_card
from backend.training.dataset import distil
from backend.training.kinds import KINDS
from backend.training.loop import CHECKPOINT, TrainReport, TrainSettings, mixed_precision, train
from tests.helpers.cli import run_main
from tests.helpers.tiny import save_tiny, tiny_instructions
from tests.helpers.trained import small_settings
from tests.helpers.workers import ROOT

HEAD_SETTINGS = {
    "mtp": {},
    "draft-model": {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64},
}


@pytest.fixture(scope="module")
def data(tiny, tmp_path_factory):
    root = tmp_path_factory.mktemp("distil")
    instructions = tiny_instructions(64)
    layers = tuple(sorted({layer for kind in KINDS.values() for layer in kind.training_layers(tiny)}))
    train_data = distil(tiny, instructions, layers, "train", 24, cache_root=root)
    validation_data = distil(tiny, instructions, layers, "validation", 24, cache_root=root)
    validation = [i for i in instructions if i.split == "validation"] or instructions[:2]
    return train_data, validation_data, validation


@pytest.mark.parametrize("name", sorted(KINDS))
def test_every_kind_trains_validates_saves_and_loads_losslessly(tiny, data, tmp_path, name):
    torch.manual_seed(0)
    kind = KINDS[name]
    train_data, validation_data, validation = data
    head = kind.new_head(tiny, HEAD_SETTINGS.get(name, {"draft_vocab_size": 48}))
    report = train(kind, tiny, head, train_data, validation_data, validation, small_settings(30), tmp_path)
    assert not head.training, "train returns the head in eval mode, as it saved it"
    assert report.steps == 30 and report.validation and report.validation[-1]["al"] >= 1.0
    assert math.isfinite(report.validation[-1]["validation_loss"])
    first, last = report.train_loss[0][1], sum(loss for _, loss in report.train_loss[-5:]) / 5
    assert last < first, (first, last)
    drafter = build_drafter(name, tiny, DrafterOptions(drafter_path=str(tmp_path)))
    engine = SpeculativeEngine(tiny.model, tiny.eos_token_ids, 512)
    prompt = [5, 9, 13, 22, 5, 9, 13, 40]
    plain = engine.generate(prompt, None, GenerationSettings(24, draft_len=0)).run().output_ids
    assert engine.generate(prompt, drafter, GenerationSettings(24, draft_len=4)).run().output_ids == plain


@pytest.mark.parametrize("name", ["eagle3", "dspark", "draft-model"])
def test_kinds_train_under_bf16_autocast_with_the_teacher_in_full_precision(tiny, data, tmp_path, name):
    torch.manual_seed(0)
    kind, parts = KINDS[name], TargetParts.of(tiny)
    train_data, validation_data, validation = data
    states = torch.randn(3, 5, parts.hidden_size)  # [B, T, H]
    full = parts.lm_head(states).detach()  # [B, T, V] fp32
    with mixed_precision(tiny.device, torch.bfloat16):
        assert F.linear(states, parts.lm_head.weight).dtype == torch.bfloat16  # autocast is on...
        assert torch.equal(teacher_logits(parts, states), full)  # ...and the teacher is not rounded
    head = kind.new_head(tiny, HEAD_SETTINGS.get(name, {"draft_vocab_size": 48}))
    settings = TrainSettings(**{**small_settings(30).__dict__, "autocast_dtype": torch.bfloat16})
    report = train(kind, tiny, head, train_data, validation_data, validation, settings, tmp_path)
    first, last = report.train_loss[0][1], sum(loss for _, loss in report.train_loss[-5:]) / 5
    assert last < first and math.isfinite(report.validation[-1]["validation_loss"]), (first, last)
    assert all(p.dtype == torch.float32 for p in head.parameters())  # fp32 master weights


def test_training_resumes_from_its_checkpoint(tiny, data, tmp_path):
    train_data, validation_data, validation = data
    settings = small_settings(20)
    first_run, second_run = {"data": "prefilled readings", "command": "train --teacher prefill"}, {"data": "mix"}
    first = train(
        eagle3, tiny, eagle3.new_head(tiny), train_data, validation_data, validation, settings, tmp_path, run=first_run
    )
    assert (tmp_path / CHECKPOINT).is_file()
    longer = TrainSettings(**{**settings.__dict__, "tokens": settings.tokens * 2})
    heard: list[float] = []
    resumed = train(
        *(eagle3, tiny, eagle3.new_head(tiny), train_data, validation_data, validation, longer, tmp_path),
        progress=lambda step, total, metrics: heard.append(metrics["seconds"]),
        run=second_run,
    )
    assert resumed.steps == 40 and resumed.train_loss[:20] == first.train_loss  # the first 20 were not redone
    assert first.seconds < heard[0] <= heard[-1] == resumed.seconds  # progress counts the first run's time too
    assert resumed.runs == [{"from_step": 0, **first_run}, {"from_step": 20, **second_run}]
    card = write_card(
        tmp_path,
        "eagle3",
        tiny,
        resumed,
        longer,
        {},
        {
            "corpus": "test",
            "train_sequence_tokens": 1,
            "validation_sequence_tokens": 1,
            "distil_seconds": 0,
            "device": "cpu",
            "dtype": "float32",
            "hardware": "test",
            "command": "train",
        },
    )
    text = card.read_text()
    assert "Validation curve" in text and "python -m backend train --kind eagle3" in text
    assert "steps 0-20: prefilled readings; `python -m backend train --teacher prefill`" in text
    assert "steps 20-40: mix" in text
    runs = json.loads((tmp_path / "card.json").read_text())["runs"]
    assert [(r["from_step"], r["to_step"], r["data"]) for r in runs] == [(0, 20, "prefilled readings"), (20, 40, "mix")]


def test_resuming_a_finished_run_trains_nothing_and_records_no_run(tiny, data, tmp_path):
    settings = small_settings(20)
    first = train(eagle3, tiny, eagle3.new_head(tiny), *data, settings, tmp_path, run={"data": "mix"})
    again = train(eagle3, tiny, eagle3.new_head(tiny), *data, settings, tmp_path, run={"data": "evaluation only"})
    assert again.steps == first.steps == 20 and again.train_loss == first.train_loss
    assert again.runs == [{"from_step": 0, "data": "mix"}]


def test_steps_from_a_checkpoint_that_kept_no_runs_count_as_one_unrecorded_run():
    report = TrainReport(40, 9.0, runs=[{"from_step": 25, "data": "mix"}])
    runs = training_runs(report)
    assert [(r["from_step"], r["to_step"]) for r in runs] == [(0, 25), (25, 40)] and "not recorded" in runs[0]["data"]
    assert training_runs(TrainReport(10, 1.0)) == [{"from_step": 0, "data": runs[0]["data"], "to_step": 10}]


def test_feature_noise_trains_a_chain_head_and_is_refused_for_other_kinds(tiny, data, tmp_path):
    torch.manual_seed(0)
    train_data, validation_data, validation = data
    settings = TrainSettings(**{**small_settings(30).__dict__, "feature_noise": 0.2})
    head = KINDS["eagle3"].new_head(tiny, {"draft_vocab_size": 48})
    report = train(KINDS["eagle3"], tiny, head, train_data, validation_data, validation, settings, tmp_path / "e")
    assert head.feature_noise == 0.2
    first, last = report.train_loss[0][1], sum(loss for _, loss in report.train_loss[-5:]) / 5
    assert last < first, (first, last)
    dflash = KINDS["dflash"].new_head(tiny, {"draft_vocab_size": 48})
    with pytest.raises(SpecScopeError, match="feature noise is for the chain heads \\(eagle3, mtp\\), not dflash"):
        train(KINDS["dflash"], tiny, dflash, train_data, validation_data, validation, settings, tmp_path / "d")


@pytest.mark.parametrize(
    "args, message",
    [
        (["--kind", "medusa"], "unknown drafter kind 'medusa'"),
        (["--kind", "eagle3", "--settings", '{"layers": [99]}'], "layers must be hidden-state indices"),
        (["--kind", "eagle3", "--settings", "{layers: [9]}"], "expected a JSON object"),
        (["--kind", "eagle3", "--minutes", "0"], "--minutes must be positive"),
        (["--kind", "eagle3", "--feature-noise", "-0.1"], "--feature-noise is a share of each state's size"),
        (["--kind", "dflash", "--feature-noise", "0.2"], "for the chain heads (eagle3, mtp), not dflash"),
        (["--kind", "eagle3", "--ship", "{out}"], "give --out another folder"),
        (["--kind", "eagle3", "--init-from", "{out}", "--settings", '{"layers": [1]}'], "leave out --settings"),
        (["--kind", "eagle3", "--init-from", "{out}"], "no trained eagle3 drafter at"),
    ],
)
def test_train_command_rejects_bad_input_clearly(tiny, tmp_path, monkeypatch, capsys, args, message):
    folder, out = save_tiny(tiny, tmp_path / "tiny"), str(tmp_path / "out")
    monkeypatch.setenv("SPECSCOPE_CACHE", str(tmp_path / "cache"))
    given = [arg.replace("{out}", out) for arg in args]
    ran = run_main(["train", "--target", str(folder), "--out", out, *given], capsys)
    assert ran.status == 2 and "error:" in ran.last_error and message in ran.last_error, ran.stderr
    assert not list((tmp_path / "cache").rglob("*.safetensors")), "bad input is refused before anything is distilled"


@pytest.mark.slow
def test_train_command_end_to_end(tiny, tmp_path):
    folder = save_tiny(tiny, tmp_path / "tiny")

    def run_train(out: str, *more: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [
                *(sys.executable, "-m", "backend", "train", "--kind", "eagle3", "--target", str(folder)),
                *("--out", str(tmp_path / out), "--tokens", "4096", "--data-tokens", "3000", "--answer-tokens", "16"),
                *("--window", "32", "--rows", "4", "--validate-every", "16", "--precision", "bf16", *more),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "SPECSCOPE_CACHE": str(tmp_path / "cache")},
        )

    done = run_train("out")
    assert done.returncode == 0, done.stderr
    assert "trained eagle3: 32 steps" in done.stdout
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert config["kind"] == "eagle3" and "bf16 autocast" in (tmp_path / "out" / "README.md").read_text()
    further = run_train("further", "--init-from", str(tmp_path / "out"))
    assert further.returncode == 0, further.stderr
    first, card = (json.loads((tmp_path / name / "card.json").read_text()) for name in ("out", "further"))
    assert card["initialised_from"] == str(tmp_path / "out") and card["steps"] == 64  # 32 before, 32 here
    assert card["training_tokens"] == 2 * first["training_tokens"] and card["seconds"] >= first["seconds"]
    assert card["validation"][: len(first["validation"])] == first["validation"]  # one curve over both
    assert [v["tokens"] for v in card["validation"]][len(first["validation"]) :] == [6144, 8192]
    assert [(r["from_step"], r["to_step"]) for r in card["runs"]] == [(0, 32), (32, 64)]
    readme = (tmp_path / "further" / "README.md").read_text()
    assert f"Started from the weights in `{tmp_path / 'out'}` (32 steps" in readme


@pytest.mark.slow
def test_train_command_distils_once_then_trains_a_student_for_a_time_budget(tiny, tmp_path):
    folder = save_tiny(tiny, tmp_path / "tiny")
    common = [
        "--target",
        str(folder),
        "--data-tokens",
        "3000",
        "--answer-tokens",
        "16",
        "--window",
        "32",
        "--rows",
        "4",
        "--validation-prompts",
        "1",
        "--teacher",
        "mix",
    ]
    env = {**os.environ, "SPECSCOPE_CACHE": str(tmp_path / "cache")}
    distilled = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend",
            "train",
            "--kind",
            "eagle3",
            "--out",
            str(tmp_path / "unused"),
            "--distil-only",
            *common,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert distilled.returncode == 0 and "distilled" in distilled.stdout, distilled.stderr
    assert distilled.stdout.count(str(tmp_path / "cache")) == 2  # generated answers and read references
    assert not (tmp_path / "unused").exists()
    settings = json.dumps(HEAD_SETTINGS["draft-model"])
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "backend",
            "train",
            "--kind",
            "draft-model",
            "--out",
            str(tmp_path / "student"),
            "--minutes",
            "0.05",
            "--tokens",
            "1000000000",
            "--distil-minutes",
            "0",
            "--settings",
            settings,
            *common,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "trained draft-model:" in done.stdout and "train draft-model" in done.stderr  # the bar
    steps = int(done.stdout.split("trained draft-model: ")[1].split(" steps")[0])
    assert 1 < steps < 1000000000 // (32 * 4)  # the time budget ended it
    assert json.loads((tmp_path / "student" / "config.json").read_text())["model_type"] == "llama"
    assert f"--settings '{settings}'" in (tmp_path / "student" / "README.md").read_text()  # pasteable as written


def test_trained_drafters_are_found_for_their_own_target_only(tiny, data, tmp_path):
    from backend.core.errors import SpecScopeError
    from backend.drafters import trained_folders
    from tests.helpers.tiny import tiny_llama

    train_data, validation_data, validation = data
    folder = tmp_path / "eagle3-tiny"
    train(eagle3, tiny, eagle3.new_head(tiny), train_data, validation_data, validation, small_settings(2), folder)
    assert trained_folders(tiny, tmp_path) == {"eagle3": folder}
    assert trained_folders(tiny_llama(seed=1), tmp_path) == {}  # another target's fingerprint
    assert build_drafter("eagle3", tiny, DrafterOptions(drafter_path=str(folder))).name == "eagle3"
    with pytest.raises(SpecScopeError, match="no trained dflash drafter for 'tiny-0'"):
        build_drafter("dflash", tiny)


def test_the_batched_engine_and_generate_give_the_same_greedy_answers(tiny, monkeypatch):
    from backend.training import dataset

    prompts = [[5, 9, 13, 22], [5, 9, 13, 22, 5, 9, 13, 40, 41], [7, 8]]  # ragged: generate left-pads them
    answers = dataset.engine_answers(tiny, prompts, 12)
    assert answers == dataset.generated_answers(tiny, prompts, 12) and all(answers)
    for answer in answers:  # each stops at its first end token, or at the length
        ends = [i for i, token in enumerate(answer) if token in tiny.eos_token_ids]
        assert ends == [len(answer) - 1] if ends else len(answer) == 12
    monkeypatch.setattr(dataset, "compile_mode", lambda model, choice: "on")  # where the compiled passes run
    monkeypatch.setattr(dataset, "generated_answers", None)  # ...generate is not called
    assert dataset.greedy_answers(tiny, prompts, 12) == answers


@pytest.mark.parametrize(
    "name, settings",
    [
        *((name, HEAD_SETTINGS.get(name, {"draft_vocab_size": 48})) for name in sorted(KINDS)),
        ("draft-model", {"share_target_embedding": True, "num_layers": 1, "draft_vocab_size": 48}),
    ],
)
def test_every_kind_trains_further_from_the_weights_it_saved(tiny, data, tmp_path, name, settings):
    torch.manual_seed(0)
    kind, (train_data, validation_data, validation) = KINDS[name], data
    counts = torch.arange(tiny.facts.vocab_size).flip(0)  # a reduced vocabulary other than the first ids
    head = kind.new_head(tiny, settings, counts)
    first = train(kind, tiny, head, train_data, validation_data, validation, small_settings(10), tmp_path / "first")
    loaded, loaded_settings = kind.load_trained(tiny, tmp_path / "first")
    assert loaded.training  # and the settings rebuild a head of the same parameters
    assert kind.new_head(tiny, loaded_settings).state_dict().keys() == head.state_dict().keys()
    trainable = {n for n, p in head.named_parameters() if p.requires_grad}
    assert {n for n, p in loaded.named_parameters() if p.requires_grad} == trainable
    saved, read = head.state_dict(), loaded.state_dict()
    assert saved.keys() == read.keys()
    for key, tensor in saved.items():  # stored in float16
        assert torch.allclose(read[key].float(), tensor.float(), rtol=1e-2, atol=1e-3), key
    vocabulary = getattr(head, "d2t", getattr(head, "draft_vocabulary", None))
    if vocabulary is not None:
        assert torch.equal(getattr(loaded, "d2t", getattr(loaded, "draft_vocabulary", None)), vocabulary)
    before = first.validation[-1]["validation_loss"]
    further = train(kind, tiny, loaded, train_data, validation_data, validation, small_settings(10), tmp_path / "b")
    assert further.steps == 10 and further.validation[-1]["validation_loss"] < before  # it went on, not afresh
