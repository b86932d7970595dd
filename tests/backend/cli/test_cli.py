"""`python -m backend` as a user runs it: real subprocesses, a tiny model folder, the real default; help and
refusals of bad input run the same `main` in-process (tests/helpers/cli.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend.core.cpu_features import cpu_features
from tests.helpers.cli import run_main

ROOT = Path(__file__).resolve().parents[3]


def cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "backend", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def tiny_suite(tmp_path_factory) -> str:
    suite = tmp_path_factory.mktemp("suites") / "question.jsonl"
    lines = [
        {"question_id": 1, "category": "copy", "turns": ["w5 w9 w13 w5 w9 w13"]},
        {"question_id": 2, "category": "chat", "turns": ["w20 w21", "w22 w23"]},
    ]
    suite.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return str(suite)


@pytest.mark.parametrize(
    "command",
    [[], ["generate"], ["bench"], ["bench", "speed"], ["bench", "sweep"], ["export", "eagle3"], ["training-data"]],
)
def test_every_command_has_help(command, capsys):
    ran = run_main([*command, "--help"], capsys)
    assert ran.status == 0 and "usage:" in ran.stdout


@pytest.mark.slow
def test_generate_json_is_lossless_and_complete(tiny_folder):
    common = [
        "generate",
        "--prompt",
        "w5 w9 w13 w5 w9 w13",
        "--target",
        tiny_folder,
        "--max-new-tokens",
        "30",
        "--json",
    ]
    plain = json.loads(cli(*common, "--draft-len", "0").stdout)
    spec = json.loads(cli(*common, "--drafter", "ngram", "--draft-len", "4").stdout)
    assert spec["output_ids"] == plain["output_ids"] and len(plain["output_ids"]) > 0
    assert spec["text"] == plain["text"]
    summary_keys = {"al", "acceptance_rate", "new_tokens", "target_forwards", "decode_s", "tokens_per_s"}
    assert summary_keys <= spec["summary"].keys()
    assert spec["summary"]["new_tokens"] == len(spec["output_ids"])
    assert spec["summary"]["target_forwards"] == len(spec["steps"])
    step = spec["steps"][0]
    step_keys = {"index", "drafted", "draft_probs", "accepted", "target_token", "emitted", "draft_s", "verify_s"}
    assert step_keys <= step.keys()


@pytest.mark.slow
def test_generate_text_marks_accepted_drafts(tiny_folder):
    out = cli(
        "generate",
        "--prompt",
        "w5 w9 w13 w5 w9 w13",
        "--target",
        tiny_folder,
        "--drafter",
        "suffix",
        "--draft-len",
        "8",
        "--max-new-tokens",
        "40",
    ).stdout
    assert "[[" in out and "]]" in out
    assert "AL " in out and "target forwards" in out


@pytest.mark.slow
def test_generate_suite_prints_one_json_line_per_prompt(tiny_folder, tiny_suite):
    out = cli(
        "generate",
        "--suite",
        tiny_suite,
        "--target",
        tiny_folder,
        "--drafter",
        "suffix",
        "--max-new-tokens",
        "12",
        "--json",
    ).stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert [(r["question_id"], r["category"]) for r in records] == [(1, "copy"), (2, "chat")]
    assert len(records[1]["turns"]) == 2 and all("output_ids" in r and "summary" in r for r in records)


@pytest.mark.slow
def test_bench_speed_json_last_line(tiny_folder, tiny_suite):
    result = cli(
        "bench",
        "speed",
        "--suite",
        tiny_suite,
        "--target",
        tiny_folder,
        "--drafters",
        "ngram,suffix",
        "--draft-lens",
        "2,auto",
        "--max-new-tokens",
        "16",
        "--json",
    )
    report = json.loads(result.stdout.splitlines()[-1])
    plain = report["summary"].pop("plain@0")
    assert plain["compile"] == "off" and plain["tokens_per_s"] > 0 and plain["vs_hf_generate"] > 0
    assert plain["graphs"] == "eager" and "one-row passes: eager" in result.stdout
    assert plain["decode_tokens_per_s"] > plain["tokens_per_s"]  # the same tokens without the prefill's time
    assert set(report["summary"]) == {"ngram@2", "ngram@auto", "suffix@2", "suffix@auto", "hf-assisted@2"}
    assert report["summary"]["hf-assisted@2"]["geomean_decode_speedup_vs_plain"] is None  # HF's time is not split
    assert all(report["summary"][label]["geomean_decode_speedup_vs_plain"] > 0 for label in ("ngram@2", "suffix@auto"))
    for row in report["summary"].values():
        assert {
            "geomean_speedup_vs_plain",
            "geomean_speedup_vs_hf_assisted",
            "worst_category_speedup",
            "al",
            "lossless",
        } <= row.keys()
        assert row["lossless"] == "2/2"
    row = report["results"][0]
    assert {
        "drafter",
        "draft_len",
        "category",
        "al",
        "tokens_per_s",
        "speedup_vs_plain",
        "speedup_vs_hf_assisted",
        "lossless",
    } <= row.keys()
    ours = [row for row in report["results"] if row["drafter"] != "hf-assisted"]  # HF reports no steps
    for row in ours:  # one prompt per category: the CI is that prompt's AL
        assert row["al_ci_low"] <= row["al"] <= row["al_ci_high"]
    assert "AL by category (95% bootstrap CI" in result.stdout
    assert re.search(r"(\d+)/\1 \[[^\]]*(run/s|s/run)", result.stderr), result.stderr[-500:]  # the bar, finished


def test_a_disagreement_with_hugging_face_is_located_with_its_logit_margin(tiny):
    from backend.core.engine import GenerationSettings
    from backend.lab.bench import first_disagreement
    from backend.lab.runner import Runner

    plain = Runner(tiny).run(["w5 w9 w13 w5 w9"], None, GenerationSettings(max_new_tokens=12, draft_len=0))
    ours = plain.turns[0].output_ids
    assert first_disagreement(tiny, plain, [list(ours)]) is None
    changed = [*ours[:3], (ours[3] + 1) % 60 + 4, *ours[4:]]
    found = first_disagreement(tiny, plain, [changed])
    assert (found["turn"], found["position"], found["ours"], found["theirs"]) == (0, 3, ours[3], changed[3])
    assert found["margin"] > 0  # ours is the target's argmax there
    assert first_disagreement(tiny, plain, [ours[:5]])["position"] == 5  # HF stopped early


@pytest.mark.slow
def test_bench_forward_times_eager_beside_compiled(tiny_folder):
    result = cli(
        "bench",
        "forward",
        "--target",
        tiny_folder,
        "--compile",
        "on",
        "--batch-sizes",
        "1",
        "--widths",
        "1,4",
        "--context",
        "20",
        "--repeats",
        "2",
        "--prefill",
        "--json",
    )
    report = json.loads(result.stdout.splitlines()[-1])
    rows = {(r["mode"], r["batch_size"], r["tokens"]): r for r in report["results"]}
    [prefill] = report["prefill"]  # a suite prompt's first token, prefilled alone and in its group of one
    assert prefill["batch_size"] == 1 and prefill["prompt_tokens"] > 0 and prefill["grouped_s"] > 0
    assert prefill["speedup"] == pytest.approx(prefill["one_by_one_s"] / prefill["grouped_s"])
    assert "prefilled one by one / grouped" in result.stdout
    assert set(rows) == {(mode, 1, width) for mode in ("eager", "compiled") for width in (1, 4)}
    assert all(r["ms"] > 0 for r in rows.values()) and rows[("compiled", 1, 1)]["vs_one_token"] == 1.0
    assert set(report["plain_tps"]) == {"eager", "compiled"} and report["roofline_tps"] > 0
    assert report["dtype"] == "float32" and report["cpu_features"] == list(cpu_features())
    assert f"CPU features {' '.join(cpu_features()) or 'none'}" in result.stdout
    assert report["graphs"] == "torch.compile"  # tests turn packages off
    assert "one-row passes ran on torch.compile" in result.stdout
    assert "compiled" in result.stdout and "vs T=1" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "--prompt", ""], "prompt is empty"),
        (["generate", "--prompt", "hi", "--draft-len", "-3"], "between 0 and 64"),
        (["generate", "--prompt", "hi", "--draft-len", "500"], "between 0 and 64"),
        (["generate", "--prompt", "hi", "--temperature", "-1"], "temperature must be between 0 and 10"),
        (["generate", "--prompt", "hi", "--temperature", "inf"], "temperature must be between 0 and 10"),
        (["generate", "--prompt", "hi", "--drafter", "none", "--tree-budget", "8"], "drafts no token trees"),
        (["generate", "--prompt", "hi", "--drafter", "nope"], "unknown drafter"),
        (["generate", "--prompt", "hi", "--target", "/missing/model"], "no such model folder"),
        (["generate", "--prompt", "hi", "--target", str(ROOT / "README.md")], "is a file but not a .gguf file"),
        (["generate", "--prompt-file", "/missing/prompt.txt"], "cannot read prompt file"),
        (["generate", "--suite", "/missing/suite.jsonl"], "no such prompt suite"),
        (["bench", "speed", "--suite", "/missing.jsonl", "--drafters", "bogus"], "unknown drafter"),
    ],
)
def test_bad_input_is_one_clear_line(args, message, tiny_folder, capsys):
    """In-process (the same `main` the subprocess runs) to keep the suite fast."""
    if "--target" not in args and args[0] == "generate" and "--suite" not in args:
        args = [*args, "--target", tiny_folder]
    ran = run_main(args, capsys)
    assert ran.status == 2 and ran.stderr.startswith("error:") and message in ran.stderr
    assert ran.stderr.count("\n") == 1


def test_unreadable_or_empty_suites_are_one_clear_line(tmp_path, capsys):
    binary, empty = tmp_path / "suite.bin", tmp_path / "empty.jsonl"
    binary.write_bytes(bytes(range(256)) * 8)
    empty.write_text("\n")
    for suite, message in ((binary, "is not UTF-8 text"), (empty, "has no prompts to run")):
        for command in (["generate"], ["bench", "speed", "--drafters", "ngram"]):
            ran = run_main([*command, "--suite", str(suite)], capsys)
            assert ran.status == 2 and ran.stderr.startswith("error:") and message in ran.last_error
            assert ran.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--limit", "-1", "expected an integer >= 1, got -1"),
        ("--seed", "1" + "0" * 24, "a seed must fit in 64 bits"),
        ("--tree-budget", "100000", "tree budgets must be between 0 and 64"),
    ],
)
def test_flag_values_out_of_range_are_refused_before_anything_runs(flag, value, message, capsys):
    ran = run_main(["generate", "--prompt", "hi", flag, value], capsys)
    assert ran.status == 2 and message in ran.last_error


def test_prompt_longer_than_the_context(tiny_folder, tmp_path, capsys):
    prompt = tmp_path / "long.txt"
    prompt.write_text(" ".join(["w7"] * 600))  # the tiny model's context is 512
    ran = run_main(["generate", "--prompt-file", str(prompt), "--target", tiny_folder], capsys)
    assert ran.status == 2 and ran.stderr.startswith("error:") and "context is 512" in ran.last_error


@pytest.mark.slow
def test_suffix_decoding_on_the_embedded_default():
    result = cli(
        "generate",
        "--prompt",
        "Repeat exactly: the quick brown fox jumps over the lazy dog.",
        "--drafter",
        "suffix",
        "--draft-len",
        "8",
        "--max-new-tokens",
        "40",
        "--json",
    )
    record = json.loads(result.stdout)
    assert "fox" in record["text"]
    assert record["summary"]["al"] > 1.0 and record["summary"]["new_tokens"] == len(record["output_ids"])
