"""An engine sweep run from the command line while a worker holds the store: every point is stored by
the worker (the only writer), shows among the target's sweep points with its engine, and a resumed sweep
goes through the worker too."""

from __future__ import annotations

import json

import pytest

from backend.cli.main import main
from backend.serving.client import WorkerClient, WorkerError, WorkerSweepSink
from tests.backend.engines.fake_engine import FakeEngine


def test_an_engine_sweep_is_stored_by_the_worker_that_holds_the_store(worker, capsys):
    with FakeEngine("sglang") as server:
        code = main(
            ["bench", "sweep", "--engine", "sglang", "--url", server.url, "--db", str(worker.db)]
            + ["--target", "served-model", "--per-category", "1", "--concurrency", "1,2", "--max-new-tokens", "4"]
            + ["--json"]
        )
    output = capsys.readouterr()
    assert code == 0 and f"stored by the worker at {worker.url}" in output.err
    report = json.loads(output.out.strip().splitlines()[-1])
    client = WorkerClient(worker.url)
    points = client.sweep_points(target="served-model")
    assert sorted(p["batch_size"] for p in points) == [1, 2]
    assert {(p["engine"], p["engine_version"], p["drafter"], p["draft_len"]) for p in points} == {
        ("sglang", "sglang-fake-1.0", "sglang/spec", "server")
    }
    assert [s["status"] for s in client.sweeps() if s["sweep_id"] == report["sweep_id"]] == ["complete"]

    sink = WorkerSweepSink(client)
    assert sink.measured_configs(report["sweep_id"]) == {("sglang/spec", "server", 1), ("sglang/spec", "server", 2)}
    row = sink.sweep(report["sweep_id"])
    assert (row["engine"], row["engine_version"], row["status"]) == ("sglang", "sglang-fake-1.0", "complete")
    with pytest.raises(WorkerError, match="no sweep nope"):
        sink.resume_sweep("nope")
    with pytest.raises(WorkerError, match="404.*no sweep nope"):
        sink.sweep("nope")
    with pytest.raises(WorkerError, match="422"):
        sink.add_sweep_points(report["sweep_id"], [{"draft_len": 2}])  # no drafter, batch size, category
    with pytest.raises(WorkerError, match="404.*no sweep nope"):
        sink.add_sweep_points("nope", [])
    with pytest.raises(WorkerError, match="409.*already stored"):
        sink.start_sweep(report["sweep_id"], "served-model", None, "here", {}, {"engine": "sglang"})
