"""`generate --tree-budget` in-process (the same `main` the command runs): tree steps in the JSON and the
same text as plain decoding, the trees verified on the eager passes and on the compiled ones `--compile auto` picks
here (slow: it compiles the target's graphs)."""

from __future__ import annotations

import json

import pytest

from backend.cli.main import main

PROMPT = "w4 w5 w6 w4 w5 w7 w4 w5 w8 w4 w5 w4 w5 w6 w4 w5 w7 w4 w5 w8 w4 w5"


def generate(tiny_folder, capsys, *extra: str) -> dict:
    common = ["generate", "--prompt", PROMPT, "--target", tiny_folder, "--max-new-tokens", "40", "--json"]
    assert main([*common, "--no-chat-template", *extra]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("compile", ["off", pytest.param("auto", marks=pytest.mark.slow)])
def test_generate_with_a_tree_budget_is_lossless_and_shows_tree_steps(tiny_folder, capsys, compile):
    plain = generate(tiny_folder, capsys, "--draft-len", "0")
    tree = generate(
        tiny_folder, capsys, "--drafter", "ngram", "--draft-len", "4", "--tree-budget", "8", "--compile", compile
    )
    assert tree["output_ids"] == plain["output_ids"] and tree["tree_budget"] == 8
    tree_steps = [step for step in tree["steps"] if step["parents"] is not None]
    assert tree_steps and all(len(step["drafted"]) <= 8 for step in tree_steps)
    assert all(step["accepted"] == len(step["accepted_path"]) for step in tree_steps)
