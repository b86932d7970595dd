"""Training rounds: new weights replace the shipped ones only when their AL gain over the shipped ones, prompt
by prompt, has a 95% bootstrap CI above zero; the shipped folder's card records every round either way, and a
checkpoint never ships."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from backend.drafters import eagle3
from backend.training import rounds
from backend.training.card import write_card
from backend.training.loop import CHECKPOINT, TrainReport, TrainSettings
from tests.backend.training.test_card import FACTS


def suite(al: float | list[float]) -> list[dict]:
    """suite_acceptance's rows at D = 4 for two prompts each of qa and writing, whose ALs are `al` (one figure
    for all four, or one per prompt: qa's two, then writing's), each prompt 20 drafting steps."""
    als = [al] * 4 if isinstance(al, float) else al
    rows = []
    for category, pair in (("qa", als[:2]), ("writing", als[2:])):
        prompts = [[round((value - 1) * 20), 20] for value in pair]
        mean = sum(pair) / 2
        rows.append(
            {"category": category, "draft_len": 4, "al": mean, "al_ci_low": min(pair), "al_ci_high": max(pair)}
            | {"prompts": prompts}
        )
    return rows


def weights_folder(tiny, path, seed: int, al: float | list[float], shipped_as: Path | None = None):
    """An eagle3 head with its own random weights, its card measured at `al`, and a checkpoint beside it."""
    torch.manual_seed(seed)
    head = eagle3.new_head(tiny)
    eagle3.save(head, tiny, path)
    report = TrainReport(
        steps=10, seconds=12.0, validation=[{"step": 10, "tokens": 1280, "validation_loss": 3.0, "al": 1.5}]
    )
    write_card(path, "eagle3", tiny, report, TrainSettings(), {}, FACTS, suite(al), shipped_as)
    (path / CHECKPOINT).write_bytes(b"optimizer state")
    return path


@pytest.fixture
def measured_as(monkeypatch):
    """suite_acceptance of a drafter built from a folder reads that folder's card (the measurement itself is
    the card module's, tested there): the decision is what is tested here."""

    def measure(target, drafter, draft_lens, per_category):
        assert draft_lens == (4,) and per_category == 2  # measured as the candidate was
        return drafter.measured

    original = rounds.build_drafter

    def build(kind, target, options):
        drafter = original(kind, target, options)
        drafter.measured = json.loads((Path(options["drafter_path"]) / "card.json").read_text())["suite"]
        return drafter

    monkeypatch.setattr(rounds, "suite_acceptance", measure)
    monkeypatch.setattr(rounds, "build_drafter", build)


def test_the_first_round_ships_without_its_checkpoint(tiny, tmp_path, measured_as):
    candidate = weights_folder(tiny, tmp_path / "new", seed=1, al=1.3)
    shipped = tmp_path / "shipped"
    outcome = rounds.ship_if_better("eagle3", tiny, candidate, shipped, suite(1.3), per_category=2)
    assert outcome.shipped and outcome.previous_score is None and outcome.score == pytest.approx(1.3)
    assert not (shipped / CHECKPOINT).exists() and (shipped / "model.safetensors").is_file()
    card = json.loads((shipped / "card.json").read_text())
    assert [r["shipped"] for r in card["rounds"]] == [True]


def test_worse_weights_are_not_shipped_but_the_round_is_recorded(tiny, tmp_path, measured_as):
    shipped = weights_folder(tiny, tmp_path / "shipped", seed=1, al=1.5)
    (shipped / CHECKPOINT).unlink()
    before = load_file(str(shipped / "model.safetensors"))
    candidate = weights_folder(tiny, tmp_path / "new", seed=2, al=1.2)
    outcome = rounds.ship_if_better("eagle3", tiny, candidate, shipped, suite(1.2), per_category=2)
    assert not outcome.shipped and outcome.previous_score == pytest.approx(1.5)
    after = load_file(str(shipped / "model.safetensors"))
    assert all(torch.equal(before[name], after[name]) for name in before)
    card = json.loads((shipped / "card.json").read_text())
    assert [(r["shipped"], round(r["mean_al"], 2)) for r in card["rounds"]] == [(True, 1.5), (False, 1.2)]
    assert "| no |" in (shipped / "README.md").read_text()


def test_better_weights_replace_the_shipped_ones_and_carry_the_history(tiny, tmp_path, measured_as):
    shipped = weights_folder(tiny, tmp_path / "shipped", seed=1, al=1.2)
    candidate = weights_folder(tiny, tmp_path / "new", seed=2, al=1.6, shipped_as=shipped)
    expected = load_file(str(candidate / "model.safetensors"))
    outcome = rounds.ship_if_better("eagle3", tiny, candidate, shipped, suite(1.6), per_category=2)
    assert outcome.shipped and outcome.previous_score == pytest.approx(1.2)
    after = load_file(str(shipped / "model.safetensors"))
    assert all(torch.equal(expected[name], after[name]) for name in expected)
    card = json.loads((shipped / "card.json").read_text())
    assert [r["shipped"] for r in card["rounds"]] == [True, True]
    readme = (shipped / "README.md").read_text()
    assert readme.count(rounds.ROUNDS_HEADING) == 1 and "| 1.60 | 1.20 | +0.400 (+0.400 to +0.400) | yes |" in readme
    assert readme.startswith("# shipped: eagle3 drafter") and "--init-from data/drafters/shipped " in readme  # its home


def test_a_higher_mean_carried_by_one_prompt_does_not_ship(tiny, tmp_path, measured_as):
    """Mean AL 1.375 against 1.30, but three of four prompts got worse: the gain's CI reaches below zero."""
    shipped = weights_folder(tiny, tmp_path / "shipped", seed=1, al=1.3)
    lopsided = [1.2, 1.2, 1.2, 1.9]
    candidate = weights_folder(tiny, tmp_path / "new", seed=2, al=lopsided)
    outcome = rounds.ship_if_better("eagle3", tiny, candidate, shipped, suite(lopsided), per_category=2)
    assert outcome.score > outcome.previous_score
    gain, low, high = outcome.gain
    assert gain == pytest.approx(0.075) and low < 0 < high and not outcome.shipped


def test_a_small_gain_on_every_prompt_ships(tiny, tmp_path, measured_as):
    shipped = weights_folder(tiny, tmp_path / "shipped", seed=1, al=[1.3, 1.4, 1.5, 1.6])
    better = [1.35, 1.45, 1.55, 1.65]
    candidate = weights_folder(tiny, tmp_path / "new", seed=2, al=better)
    outcome = rounds.ship_if_better("eagle3", tiny, candidate, shipped, suite(better), per_category=2)
    assert outcome.gain[1] == pytest.approx(0.05) and outcome.shipped


def test_the_gain_pairs_the_same_prompts():
    with pytest.raises(ValueError, match="same suite prompts"):
        rounds.al_gain(suite(1.5), suite(1.5)[:1])


def test_suite_rows_keep_each_prompts_counts_so_a_drafter_pairs_with_itself(tiny):
    from backend.training.card import suite_acceptance

    torch.manual_seed(0)
    rows = suite_acceptance(tiny, eagle3.drafter(tiny, eagle3.new_head(tiny).eval()), (2,), 1, max_new_tokens=8)
    assert {row["category"] for row in rows} >= {"qa", "writing", "coding"}
    for row in rows:
        ((accepted, steps),) = row["prompts"]
        assert steps > 0 and row["al"] == pytest.approx(1 + accepted / steps)
    assert rounds.al_gain(rows, rows) == (0.0, 0.0, 0.0)
