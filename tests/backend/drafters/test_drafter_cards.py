"""Drafter cards: each shipped drafter's card.json agrees with its model card (README.md), and the
worker-facing reader returns both with paths that exist."""

from __future__ import annotations

import json
import re

import pytest

from backend.drafters.shipped import CARD_FILE, SHIPPED_DIR, drafter_card
from tests.helpers.workers import ROOT

SHIPPED = sorted(folder.name for folder in SHIPPED_DIR.iterdir() if (folder / "README.md").is_file())


def test_five_drafters_are_shipped():
    assert len(SHIPPED) == 5


@pytest.mark.parametrize("name", SHIPPED)
def test_a_shipped_card_agrees_with_its_model_card(name):
    card = drafter_card(SHIPPED_DIR / name)
    readme = (SHIPPED_DIR / name / "README.md").read_text()
    steps, rows, window, tokens = map(
        int, re.search(r"(\d+) steps of (\d+) windows x (\d+) tokens \((\d+)", readme).groups()
    )
    assert (card["steps"], card["training_tokens"]) == (steps, tokens) == (steps, steps * rows * window)
    assert f"Time: {card['seconds']} s on {card['device']}" in readme
    assert f"Cached sequence tokens: {card['train_sequence_tokens']} for training" in readme
    assert card["data"] in readme and f"--kind {card['kind']}" in readme
    last = card["validation"][-1]
    assert f"| {last['tokens']} | {last['validation_loss']:.3f} | {last['al']:.2f} |" in readme
    assert card["model_card"] == f"data/drafters/{name}/README.md" and (ROOT / card["model_card"]).is_file()
    assert card["model_card_text"] == readme and card["folder"] == f"data/drafters/{name}"


def test_a_folder_without_a_card_or_model_card_has_no_card(tmp_path):
    assert drafter_card(None) is None and drafter_card(tmp_path) is None
    (tmp_path / CARD_FILE).write_text("[1, 2]")  # not a summary
    assert drafter_card(tmp_path) is None
    (tmp_path / "README.md").write_text("# a card")
    assert drafter_card(tmp_path) == {
        "model_card": str(tmp_path.resolve() / "README.md"),
        "model_card_text": "# a card",
        "folder": str(tmp_path.resolve()),
    }
    (tmp_path / CARD_FILE).write_text(json.dumps({"steps": 3}))
    assert drafter_card(tmp_path)["steps"] == 3
