"""Training rounds: new weights replace the shipped ones only when their mean suite AL is higher, the
shipped folder's card records every round either way, and a checkpoint never ships."""

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


def suite(al: float) -> list[dict]:
    return [
        {"category": category, "draft_len": 4, "al": al, "al_ci_low": al - 0.1, "al_ci_high": al + 0.1}
        for category in ("qa", "writing")
    ]


def weights_folder(tiny, path, seed: int, al: float, shipped_as: Path | None = None):
    """An eagle3 head with its own random weights, its card measured at `al`, and a checkpoint beside it."""
    torch.manual_seed(seed)
    head = eagle3.new_head(tiny)
    eagle3.save(head, tiny, path)
    report = TrainReport(
        steps=10, seconds=12.0, validation=[{"step": 10, "tokens": 1280, "validation_loss": 3.0, "al": al}]
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
        return suite(drafter.measured_al)

    original = rounds.build_drafter

    def build(kind, target, options):
        drafter = original(kind, target, options)
        drafter.measured_al = json.loads((Path(options["drafter_path"]) / "card.json").read_text())["suite"][0]["al"]
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
    assert readme.count(rounds.ROUNDS_HEADING) == 1 and "| 1.60 | 1.20 | yes |" in readme
    assert readme.startswith("# shipped: eagle3 drafter") and "--init-from data/drafters/shipped " in readme  # its home
