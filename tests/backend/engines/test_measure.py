"""A measured point against each engine's protocol (a fake engine, tests/backend/engines/fake_engine.py,
that streams two tokens per step with one of three drafts accepted): every request is streamed and timed,
and the AL comes out as 2 from the server's counters (vLLM, TensorRT-LLM) or from each reply (SGLang,
llama.cpp), counting only what happened during the point."""

from __future__ import annotations

import json
import sys

import httpx
import pytest

from backend.cli.main import main
from backend.engines.adapters import ADAPTERS, adapter_for
from backend.engines.measure import measure_point
from tests.backend.engines.fake_engine import DRAFT, FakeEngine

PROMPTS = ["one", "two", "three", "four", "five"]


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_a_point_streams_every_request_and_reads_the_engines_acceptance(engine):
    with FakeEngine(engine) as server:
        adapter = adapter_for(engine)
        measure_point(server.url, adapter, PROMPTS[:2], concurrency=1, max_tokens=4)  # counted, then left out
        point = measure_point(server.url, adapter, PROMPTS, concurrency=2, max_tokens=8)
    assert point["engine"] == engine and point["requests"] == 5 and point["new_tokens"] == 40
    assert point["throughput_tps"] > 0 and point["interactivity_tps"] > 0
    assert point["ttft_ms_p50"] > 0 and point["tpot_ms_p50"] > 0
    assert point["al"] == pytest.approx(2.0)
    counted = engine in ("vllm", "tensorrt_llm")
    assert point["al_from"] == ("server counters" if counted else "tokens per target pass")
    if engine != "sglang":  # SGLang's meta_info here has no draft counts
        assert point["acceptance_rate"] == pytest.approx(1 / DRAFT)
    if engine == "vllm":
        assert point["survival"] == pytest.approx([1.0, 0.0, 0.0])


def test_an_unknown_engine_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown engine 'tgi': choose one of"):
        adapter_for("tgi")


def test_the_command_line_measures_each_concurrency(capsys):
    with FakeEngine("vllm") as server:
        code = main(
            ["bench", "engine", "--engine", "vllm", "--url", server.url, "--per-category", "1"]
            + ["--concurrency", "1,3", "--max-new-tokens", "6", "--json"]
        )
    assert code == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert [p["concurrency"] for p in report["points"]] == [1, 3]
    assert all(p["al"] == pytest.approx(2.0) and p["requests"] == 9 for p in report["points"])


def test_an_unreachable_engine_is_one_sentence(capsys):
    code = main(["bench", "engine", "--engine", "llamacpp", "--url", "http://127.0.0.1:9", "--per-category", "1"])
    assert code == 2 and "cannot measure the llamacpp server" in capsys.readouterr().err


def test_launch_starts_one_server_per_d_and_stops_it(capsys):
    template = (
        f"{sys.executable} -m tests.backend.engines.fake_engine --engine vllm --port {{port}} --draft-len {{draft_len}}"
    )
    code = main(
        ["bench", "engine", "--engine", "vllm", "--launch", template, "--draft-lens", "2,4"]
        + ["--per-category", "1", "--concurrency", "2", "--max-new-tokens", "4", "--json"]
    )
    assert code == 0
    points = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["points"]
    assert [p["draft_len"] for p in points] == [2, 4]
    assert [p["acceptance_rate"] for p in points] == pytest.approx([1 / 2, 1 / 4])  # each server had its own D
    for point in points:  # stopped afterwards
        with pytest.raises(httpx.TransportError):
            httpx.get(point["url"] + "/health", timeout=2)


def test_a_launched_server_that_exits_is_one_message(capsys):
    code = main(
        ["bench", "engine", "--engine", "vllm", "--launch", f"{sys.executable} -c 'print(1)'", "--draft-lens", "2"]
    )
    assert code == 2 and "the server exited with code 0 before it was up" in capsys.readouterr().err
