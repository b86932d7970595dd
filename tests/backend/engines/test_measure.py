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
from backend.engines.adapters import ADAPTERS, adapter_for, engine_version, served_model
from backend.engines.measure import measure_point
from tests.backend.engines.fake_engine import DRAFT, FakeEngine

PROMPTS = ["one", "two", "three", "four", "five"]


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_a_point_streams_every_request_and_reads_the_engines_acceptance(engine):
    with FakeEngine(engine) as server:
        adapter = adapter_for(engine)
        measure_point(server.url, adapter, PROMPTS[:2], concurrency=1, max_tokens=4)  # counted, then left out
        point = measure_point(server.url, adapter, PROMPTS, concurrency=2, max_tokens=8)
    assert point["batch_size"] == 2 and point["prompts"] == 5 and point["new_tokens"] == 40
    assert point["throughput_tps"] > 0 and point["interactivity_tps"] > 0
    assert point["ttft_s"] > 0 and point["tpot_s_p50"] > 0
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


@pytest.mark.parametrize("engine", sorted(ADAPTERS))
def test_the_servers_version_and_model_are_read(engine):
    with FakeEngine(engine) as server, httpx.Client(base_url=server.url) as http:
        version = engine_version(http, adapter_for(engine))
        assert served_model(http) == "fake-model"
    assert version == {"llamacpp": "b1-fake", "sglang": "sglang-fake-1.0"}.get(engine, f"{engine}-fake-1.0")


def test_a_server_that_does_not_say_has_no_version():
    with FakeEngine("vllm") as server, httpx.Client(base_url=server.url) as http:
        assert engine_version(http, adapter_for("llamacpp")) == "b1-fake"
        assert served_model(httpx.Client(base_url="http://127.0.0.1:9")) is None


def engine_sweep(tmp_path, *flags: str) -> list[str]:
    """`bench sweep --engine ...` into a store file of its own (no worker)."""
    return ["bench", "sweep", *flags, "--per-category", "1", "--local", "--db", str(tmp_path / "runs.duckdb")]


def test_the_command_line_measures_each_concurrency(capsys, tmp_path):
    with FakeEngine("vllm") as server:
        code = main(
            engine_sweep(tmp_path, "--engine", "vllm", "--url", server.url)
            + ["--concurrency", "1,3", "--max-new-tokens", "6", "--json"]
        )
    assert code == 0
    output = capsys.readouterr()
    report = json.loads(output.out.strip().splitlines()[-1])
    assert [p["batch_size"] for p in report["points"]] == [1, 3]
    assert all(p["al"] == pytest.approx(2.0) and p["prompts"] == 9 for p in report["points"])
    assert f"stored in {tmp_path / 'runs.duckdb'}" in output.err


def test_an_unreachable_engine_is_one_sentence(capsys, tmp_path):
    code = main(engine_sweep(tmp_path, "--engine", "llamacpp", "--url", "http://127.0.0.1:9", "--concurrency", "1"))
    assert code == 2 and "cannot reach the llamacpp server at http://127.0.0.1:9" in capsys.readouterr().err


def test_a_refused_token_is_one_sentence(capsys, tmp_path):
    with FakeEngine("vllm", token="right") as server:
        code = main(engine_sweep(tmp_path, "--engine", "vllm", "--url", server.url, "--token", "wrong"))
    assert code == 2 and f"the vllm server at {server.url} refused the token given (401)" in capsys.readouterr().err


def test_launch_starts_one_server_per_d_and_stops_it(capsys, tmp_path):
    template = (
        f"{sys.executable} -m tests.backend.engines.fake_engine --engine vllm --port {{port}} --draft-len {{draft_len}}"
    )
    code = main(
        engine_sweep(tmp_path, "--engine", "vllm", "--launch", template, "--draft-lens", "2,4")
        + ["--concurrency", "2", "--max-new-tokens", "4", "--json"]
    )
    assert code == 0
    points = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["points"]
    assert [p["draft_len"] for p in points] == ["2", "4"]
    assert [p["acceptance_rate"] for p in points] == pytest.approx([1 / 2, 1 / 4])  # each server had its own D


def test_engine_settings_are_checked_before_anything_runs(capsys, tmp_path):
    assert main(engine_sweep(tmp_path, "--engine", "vllm")) == 2
    assert "--engine needs --url (a running server) or --launch" in capsys.readouterr().err
    assert main(engine_sweep(tmp_path, "--engine", "vllm", "--launch", "x {port}")) == 2
    assert "--launch needs --draft-lens" in capsys.readouterr().err
    assert main(engine_sweep(tmp_path, "--engine", "vllm", "--url", "http://x", "--draft-lens", "2")) == 2
    assert "give it as --server-draft-len" in capsys.readouterr().err
    assert main(engine_sweep(tmp_path, "--engine", "vllm", "--url", "http://[::1")) == 2
    assert "cannot reach the vllm server at http://[::1" in capsys.readouterr().err
    assert main(engine_sweep(tmp_path, "--engine", "vllm", "--launch", "x {port}", "--draft-lens", "auto")) == 2
    assert "an engine's D values are whole numbers" in capsys.readouterr().err
    with FakeEngine("vllm") as server:
        assert main(engine_sweep(tmp_path, "--engine", "vllm", "--url", server.url, "--resume", "nope")) == 2
    assert "no sweep nope in" in capsys.readouterr().err
