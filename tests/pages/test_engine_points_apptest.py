"""Serving engines' sweeps (`bench sweep --engine`, stored through the worker) on the analysis pages, beside
SpecScope's own sweep of the same target: Pareto overlays them as their own series labelled by engine,
version and hardware; Acceptance lists their AL and survival as the engine reported them; Co-design
compares an engine's drafter with that engine's own plain decoding, with no ρ to predict from."""

from __future__ import annotations

import json

import pytest

from backend.serving.client import WorkerClient, WorkerSweepSink
from tests.helpers.apptest import page
from tests.helpers.workers import WorkerProcess

ENGINE = {"engine": "vllm", "engine_version": "0.99.0", "engine_config": {"url": "http://gpu-node:8000"}}


def engine_point(drafter: str, draft_len: int, concurrency: int, throughput: float, al: float | None) -> dict:
    return {
        "drafter": drafter,
        "draft_len": draft_len,
        "batch_size": concurrency,
        "category": "all",
        "split": "all",
        "status": "measured",
        "throughput_tps": throughput,
        "interactivity_tps": throughput / concurrency,
        "al": al,
        "acceptance_rate": None if al is None else (al - 1) / draft_len,
        "survival": [] if al is None else [0.8, 0.5],
        "al_from": None if al is None else "server counters",
    }


@pytest.fixture(scope="module")
def engine_env(tiny_folder, tmp_path_factory):
    worker = WorkerProcess(tmp_path_factory.mktemp("db") / "engines.duckdb", tiny_folder)
    worker.wait_ready()
    client = WorkerClient(worker.url)
    questions = [{"question_id": 1, "category": "copy", "turns": ["w5 w9 w13 w5 w9 w13 w22 w5 w9"]}]
    records = list(client.sweep(questions=questions, drafters=["ngram"], draft_lens=[0, 2], batch_sizes=[1]))
    assert records[-1]["type"] == "sweep"
    sink = WorkerSweepSink(client)
    sink.start_sweep("eng1", tiny_folder, None, "8x H200", {"concurrency": [1, 4]}, ENGINE)
    points = [engine_point("vllm/none", 0, c, 100.0 * c, None) for c in (1, 4)]
    points += [engine_point("vllm/ngram", d, c, 100.0 * c * (1 + d / 10), 1 + d / 4) for d in (2, 4) for c in (1, 4)]
    sink.add_sweep_points("eng1", points)
    sink.finish_sweep("eng1", "complete")
    yield worker
    worker.stop()


@pytest.fixture
def engine_pages(engine_env, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", engine_env.url)
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")


def test_pareto_overlays_engine_points_beside_specscopes(engine_pages):
    at = page("pages/pareto.py").run()
    assert not at.exception
    table = at.dataframe[0].value
    label = "vllm/ngram · 0.99.0 · 8x H200"
    assert set(table["source"]) == {"yours", label, "vllm/none · 0.99.0 · 8x H200"}
    assert len(table[table["source"] == label]) == 4
    assert not table[table["source"] != "yours"]["on_frontier"].any()  # SpecScope's frontier only
    assert any("Open squares: serving engines" in c.value for c in at.caption)
    traces = json.loads(at.get("plotly_chart")[0].proto.spec)["data"]
    engines = {t["name"]: len(t["x"]) for t in traces if t.get("legendgroup") == "engines"}
    assert engines == {label: 4, "vllm/none · 0.99.0 · 8x H200": 2}


def test_acceptance_lists_what_the_engines_reported(engine_pages):
    at = page("pages/acceptance.py").run()
    assert not at.exception
    assert "Serving engines" in [s.value for s in at.subheader]
    engines = at.dataframe[-1].value  # the last table: the engines'
    assert len(engines) == 6 and set(engines["al_from"].dropna()) == {"server counters"}
    assert set(engines["survival"].dropna()) == {"0.80, 0.50"}


def test_codesign_compares_an_engine_drafter_with_the_engines_plain_decoding(engine_pages):
    at = page("pages/codesign.py").run()
    assert not at.exception
    assert "vllm/ngram" in at.selectbox(key="cd_drafter").options
    assert "vllm/none" not in at.selectbox(key="cd_drafter").options
    at.selectbox(key="cd_drafter").set_value("vllm/ngram").run()
    assert not at.exception
    speedups = at.dataframe[2].value
    assert list(speedups["draft_len"]) == [2, 4]
    assert list(speedups["measured"]) == pytest.approx([1.2, 1.4])  # over vllm/none, not SpecScope's plain
    assert speedups["predicted"].isna().all()
    assert any("reports no draft / verify times" in c.value for c in at.caption)
    assert "serving engine" in at.info[-1].value
