"""Engines' speculative-decoding counters read into SpecScope's acceptance figures: vLLM's Prometheus text
(two engines summed, `_created` samples skipped, a server without speculation), differences between two
reads, the rebuilt per-position and histogram counts checked against the local counter fed the same steps,
llama.cpp's per-reply timings, SGLang's per-reply meta_info and TensorRT-LLM's iteration statistics."""

from __future__ import annotations

import pytest

from backend.core.metrics import AcceptanceCounter
from backend.engines.counts import EngineCounts, ReplyAcceptance
from backend.engines.llamacpp import llamacpp_acceptance
from backend.engines.sglang import sglang_acceptance
from backend.engines.tensorrt_llm import tensorrt_llm_counts
from backend.engines.vllm import spec_decode_counts


def exposition(drafts: int, draft_tokens: int, accepted: int, per_position: list[int], engines: int = 1) -> str:
    """Metrics text in vLLM's shape: each counter split evenly across `engines` engines."""
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "vllm:num_requests_running 0.0",
    ]
    for engine in range(engines):
        labels = f'engine="{engine}",model_name="m"'
        lines += [
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {drafts / engines}",
            f"vllm:spec_decode_num_drafts_created{{{labels}}} 1.7e9",
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {draft_tokens / engines}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {accepted / engines}",
        ]
        lines += [
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{k}"}} {count / engines}'
            for k, count in enumerate(per_position)
        ]
    return "\n".join(lines) + "\n"


# steps of a fixed-length (D = 3) drafter: how many drafts each accepted
ACCEPTED = [3, 0, 1, 3, 2, 0, 0, 3, 1, 2]


def local_counter() -> AcceptanceCounter:
    counter = AcceptanceCounter()
    for accepted in ACCEPTED:
        counter.add(3, accepted)
    return counter


def test_vllm_counters_give_the_same_figures_as_the_local_counter():
    local = local_counter()
    text = exposition(local.drafts, local.drafted_tokens, local.accepted_tokens, local.accepted_per_position, engines=2)
    counts = spec_decode_counts(text)
    assert counts == EngineCounts(10, 30, 15, [7, 5, 3])
    assert counts.counter().stats() == local.stats()  # AL, survival, conditional and histogram alike
    assert counts.counter().stats().al == pytest.approx(1 + 15 / 10)


def test_a_measurement_is_the_difference_of_two_reads():
    before = spec_decode_counts(exposition(100, 300, 120, [60, 40, 20]))
    after = spec_decode_counts(exposition(110, 330, 135, [67, 45, 23]))
    assert after.minus(before) == EngineCounts(10, 30, 15, [7, 5, 3])
    with pytest.raises(ValueError, match="restarted"):
        before.minus(after)


def test_a_server_without_speculation_has_no_counts():
    assert spec_decode_counts("vllm:num_requests_running 0.0\n# TYPE x counter\n") is None


def test_llamacpp_timings_give_tokens_per_pass():
    figures = llamacpp_acceptance(
        {"predicted_n": 665, "predicted_ms": 20629.2, "draft_n": 604, "draft_n_accepted": 515}
    )
    assert figures == ReplyAcceptance(generated=665, target_passes=150, drafted_tokens=604, accepted_tokens=515)
    assert figures.tokens_per_pass == pytest.approx(665 / 150) and figures.acceptance_rate == pytest.approx(515 / 604)
    assert llamacpp_acceptance({"predicted_n": 20, "predicted_ms": 300.0}) is None
    with pytest.raises(ValueError, match="inconsistent"):
        llamacpp_acceptance({"predicted_n": 20, "draft_n": 5, "draft_n_accepted": 9})


def test_sglang_meta_info_gives_its_own_acceptance_length():
    figures = sglang_acceptance({"completion_tokens": 512, "spec_verify_ct": 160})
    assert figures.tokens_per_pass == pytest.approx(3.2) and figures.acceptance_rate is None
    counted = sglang_acceptance(
        {"completion_tokens": 512, "spec_verify_ct": 160, "spec_draft_token_num": 640, "spec_accept_token_num": 352}
    )
    assert counted.acceptance_rate == pytest.approx(352 / 640)
    assert sglang_acceptance({"completion_tokens": 40, "spec_verify_ct": 0}) is None


def test_tensorrt_llm_iterations_sum_to_its_acceptance_length():
    def iteration(requests: int, drafted: int, accepted: int) -> dict:
        stats = {"numDraftTokens": drafted, "numAcceptedTokens": accepted, "numRequestsWithDraftTokens": requests}
        return {"iter": 1, "iterLatencyMS": 20.0, "specDecodingStats": stats}

    iterations = [iteration(0, 0, 0), iteration(4, 16, 10), iteration(2, 8, 2), {"iter": 9}]
    counts = tensorrt_llm_counts(iterations)
    assert counts == EngineCounts(drafts=6, drafted_tokens=24, accepted_tokens=12)
    stats = counts.counter().stats()
    assert stats.al == pytest.approx(1 + 12 / 6) and stats.acceptance_rate == pytest.approx(0.5)
    assert stats.survival == []  # not counted per position by this engine
