"""The batch-size schedule as TensorRT-LLM reads it (keys are upper bounds, batch size 1 required, no
drafts above the last key), checked by reading the converted table back the engine's way and comparing
with SpecScope's own reading at every batch size up to the last measured one; and the engine fragments
the lookup and draft-model drafters export, as Co-design writes them into each engine's command."""

from __future__ import annotations

import json

import pytest

from backend.drafters import REGISTRY, options_for
from backend.drafters.eagle3 import EXPORTED_FOLDER
from backend.drafters.engine_settings import trtllm_draft_len_schedule, trtllm_schedule_argument
from backend.lab.codesign import config_snippets


def ours(schedule: dict[int, int], batch_size: int) -> int:
    """SpecScope's reading: the entry of the largest batch size not above this one (else the first)."""
    fitting = [d for b, d in sorted(schedule.items()) if b <= batch_size]
    return fitting[-1] if fitting else schedule[min(schedule)]


def tensorrt_llm(table: dict[int, int], batch_size: int) -> int:
    """TensorRT-LLM's reading: the value of the first key at or above the batch size; none above the last."""
    return next((d for b, d in sorted(table.items()) if batch_size <= b), 0)


@pytest.mark.parametrize(
    "schedule",
    [
        {1: 8, 4: 4, 16: 2},
        {1: 4, 4: 2, 16: 0},
        {1: 4, 2: 4, 8: 1},
        {2: 6, 8: 3},
        {1: 5, 4: 0, 16: 0},
        {1: 5, 4: 3, 16: 3},
    ],
)
def test_tensorrt_llm_reads_the_same_d_at_every_measured_batch_size(schedule):
    table = trtllm_draft_len_schedule(schedule)
    assert 1 in table and table[1] == ours(schedule, 1)
    for batch_size in range(1, max(schedule) + 1):
        assert tensorrt_llm(table, batch_size) == ours(schedule, batch_size), batch_size
    beyond_one = [d for b, d in sorted(table.items()) if b > 1]
    assert all(a != b for a, b in zip(beyond_one, beyond_one[1:], strict=False)), (
        table
    )  # neighbours with one D are merged


def test_the_example_schedule_converts_as_expected():
    assert trtllm_draft_len_schedule({1: 8, 4: 4, 16: 2}) == {1: 8, 3: 8, 15: 4, 16: 2}
    assert trtllm_draft_len_schedule({1: 4, 4: 2, 16: 0}) == {1: 4, 3: 4, 15: 2}
    assert trtllm_draft_len_schedule({1: 5, 4: 3, 16: 3}) == {1: 5, 3: 5, 16: 3}  # 4..16 share D = 3: one key
    assert trtllm_draft_len_schedule({1: 5, 4: 0, 16: 0}) == {1: 5, 3: 5}  # no drafts from 4 on: left to the engine


def test_one_measured_batch_size_exports_no_schedule():
    assert trtllm_schedule_argument({1: 4}) == ""
    assert trtllm_schedule_argument({1: 4, 4: 2}) == ", draft_len_schedule={1: 4, 3: 4, 4: 2}"


def test_ngram_export_maps_the_match_window_and_the_schedule():
    spec = REGISTRY.get("ngram")
    fragments = spec.export(4, {1: 4, 4: 2}, options_for("ngram"))
    options = options_for("ngram")
    assert f"--speculative-ngram-min-match-window-size {options.ngram_min}" in fragments["sglang"]
    assert f"--speculative-ngram-max-match-window-size {options.ngram_max}" in fragments["sglang"]
    assert "draft_len_schedule={1: 4, 3: 4, 4: 2}" in fragments["tensorrt_llm"]
    assert fragments["vllm"]["method"] == "ngram" and fragments["vllm"]["prompt_lookup_max"] == options.ngram_max


def test_draft_model_export_names_vllms_method():
    fragments = REGISTRY.get("draft-model").export(3, {1: 3, 8: 1}, options_for("draft-model"))
    assert fragments["vllm"]["method"] == "draft_model" and fragments["vllm"]["num_speculative_tokens"] == 3
    assert "draft_len_schedule={1: 3, 7: 3, 8: 1}" in fragments["tensorrt_llm"]


def test_codesign_writes_the_fragments_into_each_engines_command():
    snippets = config_snippets("ngram", "4", {"1": "4", "4": "2", "16": "0"})
    vllm_config = json.loads(snippets["vllm"].split("--speculative-config ", 1)[1].strip("'"))
    assert vllm_config["method"] == "ngram" and vllm_config["num_speculative_tokens"] == 4
    assert snippets["sglang"].startswith(
        "python -m sglang.launch_server --model-path <model> --speculative-algorithm NGRAM"
    )
    assert "draft_len_schedule={1: 4, 3: 4, 15: 2}" in snippets["tensorrt_llm"]


def test_eagle3_export_points_both_engines_at_the_exported_head():
    snippets = config_snippets("eagle3", "3", {"1": "3"})
    vllm_config = json.loads(snippets["vllm"].split("--speculative-config ", 1)[1].strip("'"))
    assert vllm_config == {"method": "eagle3", "model": EXPORTED_FOLDER, "num_speculative_tokens": 3}
    assert "--speculative-algorithm EAGLE3" in snippets["sglang"]
    assert "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4" in snippets["sglang"]
    assert "tensorrt_llm" not in snippets  # its EAGLE-3 layout is not exported
