"""`generate --tree-budget` with sampling, in-process (the same `main` the command runs): tree steps in
the JSON, each step's emitted tokens its kept path plus the target's token, and one seed one text."""

from __future__ import annotations

import json

from backend.cli.main import main
from tests.backend.cli.test_generate_tree import PROMPT


def sample(tiny_folder, capsys, seed: str) -> dict:
    args = ["generate", "--prompt", PROMPT, "--target", tiny_folder, "--max-new-tokens", "40", "--json"]
    sampling = ["--temperature", "0.8", "--top-k", "20", "--seed", seed]
    assert (
        main([*args, "--no-chat-template", "--drafter", "ngram", "--draft-len", "4", "--tree-budget", "8", *sampling])
        == 0
    )
    return json.loads(capsys.readouterr().out)


def test_generate_samples_with_a_tree_budget(tiny_folder, capsys):
    first, again = sample(tiny_folder, capsys, "3"), sample(tiny_folder, capsys, "3")
    assert first["output_ids"] == again["output_ids"] and first["tree_budget"] == 8
    tree_steps = [step for step in first["steps"] if step["parents"] is not None]
    assert tree_steps
    for step in tree_steps:
        kept = [step["drafted"][node] for node in step["accepted_path"]]
        assert step["emitted"] == [*kept, step["target_token"]][: len(step["emitted"])]
