"""`bench train-step`: the training step timed per precision on the tiny target, and its command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from backend.training.kinds import KINDS
from backend.training.step_timing import random_batch, time_training_steps
from tests.helpers.cli import run_main
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import ROOT


def test_random_batch_carries_every_hidden_state_and_scores_all_but_the_last_position(tiny):
    batch = random_batch(tiny, rows=3, window=10)
    assert batch.input_ids.shape == (3, 10) and int(batch.input_ids.max()) < tiny.facts.vocab_size
    assert batch.loss_mask[:, :-1].all() and not batch.loss_mask[:, -1].any()
    states = tiny.model(input_ids=batch.input_ids, output_hidden_states=True).hidden_states
    assert sorted(batch.hidden) == list(range(len(states)))
    assert all(torch.equal(batch.hidden[layer], states[layer]) for layer in batch.hidden)


@pytest.mark.parametrize("name", ["eagle3", "dspark"])
def test_each_precision_is_timed_over_the_repeats_with_ratios_to_fp32(tiny, name):
    report = time_training_steps(KINDS[name], tiny, {}, rows=2, window=16, repeats=3)
    fp32, bf16 = report["results"]
    assert (fp32["precision"], bf16["precision"]) == ("fp32", "bf16") and fp32["vs_first"] == 1.0
    assert all(r["seconds"] > 0 and r["window_tokens_per_s"] == 32 / r["seconds"] for r in (fp32, bf16))
    assert bf16["vs_first"] == fp32["seconds"] / bf16["seconds"]
    assert (report["kind"], report["rows"], report["window"], report["repeats"]) == (name, 2, 16, 3)


def _bench(folder, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "backend", "bench", "train-step", "--target", str(folder), *args]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_command_prints_a_table_and_json(tiny, tmp_path):
    done = _bench(save_tiny(tiny, tmp_path / "tiny"), "--rows", "2", "--window", "16", "--repeats", "1", "--json")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[0].startswith("eagle3 training step, 2 x 16 tokens") and lines[1].split()[0] == "precision"
    assert [line.split()[0] for line in lines[2:4]] == ["fp32", "bf16"]
    assert [row["precision"] for row in json.loads(lines[-1])["results"]] == ["fp32", "bf16"]
    assert "timing 2 eagle3 steps of 2 x 16 tokens per precision" in done.stderr  # said before the wait


@pytest.mark.parametrize(
    "args, message",
    [
        (["--settings", "{draft_vocab_size: 64}"], "expected a JSON object"),
        (["--settings", "[1, 2]"], "expected a JSON object such as"),
        (["--kind", "medusa"], "unknown drafter kind 'medusa'"),
        (["--window", "1"], "--window at least 2"),
    ],
)
def test_bad_input_gets_one_clear_line(tiny, tmp_path, capsys, args, message):
    folder = save_tiny(tiny, tmp_path / "tiny")
    ran = run_main(["bench", "train-step", "--target", str(folder), *args], capsys)
    assert ran.status == 2 and "error:" in ran.last_error and message in ran.last_error, ran.stderr
