"""Sweeps the dashboard starts and polls (POST /sweeps/jobs), the worker's published URL, the reference
imported at start and the Acceptance filters, against a real worker process (tiny model)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter

import httpx
import pytest

from backend.lab.store_schema import RUN_KINDS
from backend.serving.client import WorkerClient, WorkerError
from backend.serving.discovery import address_file, published_url
from tests.helpers.reference import QUESTIONS, build_reference
from tests.helpers.workers import WorkerProcess

BODY = {
    "questions": [{"question_id": q.question_id, "category": q.category, "turns": list(q.turns)} for q in QUESTIONS],
    "drafters": ["ngram"],
    "draft_lens": [0, 2],
    "batch_sizes": [1],
    "max_new_tokens": 12,
}


@pytest.fixture(scope="module")
def worker(tiny, tiny_folder, tmp_path_factory):
    """A worker on a fresh store, with a reference sweep of its target to import."""
    reference = tmp_path_factory.mktemp("ref") / "reference"
    build_reference(tiny, reference, name=tiny_folder)
    process = WorkerProcess(
        tmp_path_factory.mktemp("db") / "runs.duckdb", tiny_folder, extra=["--reference", str(reference)]
    )
    process.wait_ready()
    yield process
    process.stop()


def wait_for(client: WorkerClient, job_id: str, timeout: float = 120) -> tuple[dict, list[dict]]:
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        state = client.sweep_job(job_id)
        seen.append(state)
        if state["status"] not in ("queued", "running"):
            return state, seen
        time.sleep(0.05)
    raise TimeoutError(seen[-1])


def test_a_started_sweep_runs_on_reports_progress_and_stores_its_points(worker):
    client = WorkerClient(worker.url)
    job_id = client.start_sweep(**BODY)["job_id"]
    state, seen = wait_for(client, job_id)
    assert state["status"] == "complete" and state["error"] is None
    assert state["done"] == state["total"] == len(QUESTIONS) * 3  # the greedy references, then 2 configs
    progress = [s["done"] for s in seen if s["status"] == "running"]
    assert progress == sorted(progress)
    running = [s for s in seen if s["status"] == "running"]
    assert all((s["eta_s"] is not None) == (s["done"] > 0) for s in running)  # an ETA once a step is done
    points = client.sweep_points(sweep_id=state["sweep_id"])
    assert {(p["drafter"], p["draft_len"]) for p in points if p["category"] == "all"} == {("none", "0"), ("ngram", "2")}
    with pytest.raises(WorkerError, match="no sweep job"):
        client.sweep_job("nope")


def test_a_sweep_over_dtypes_loads_the_target_in_each_and_tags_its_points(worker, tiny_folder):
    client = WorkerClient(worker.url)
    job_id = client.start_sweep(**{**BODY, "draft_lens": [0], "dtypes": ["float32", "bfloat16"]})["job_id"]
    state, _ = wait_for(client, job_id)
    assert state["status"] == "complete", state["error"]
    overall = [p for p in client.sweep_points(sweep_id=state["sweep_id"]) if p["category"] == "all"]
    assert {(p["variant"], p["dtype"]) for p in overall} == {("float32", "float32"), ("bfloat16", "bfloat16")}
    assert [t["spec"] for t in httpx.get(worker.url + "/models").json()["targets"]] == [tiny_folder]


def test_a_started_sweep_can_be_cancelled(worker):
    client = WorkerClient(worker.url)
    body = {**BODY, "draft_lens": [0, 2, 3, 4, 5, 6], "batch_sizes": [1, 2], "max_new_tokens": 64}
    job_id = client.start_sweep(**body)["job_id"]
    while client.sweep_job(job_id)["done"] < len(QUESTIONS) + 1:
        time.sleep(0.02)
    client.cancel_sweep(job_id)
    state, _ = wait_for(client, job_id)
    assert state["status"] == "cancelled" and state["done"] < state["total"]
    [sweep] = [s for s in client.sweeps() if s["status"] == "cancelled"]
    assert sweep["reference"] is None


def test_bad_sweep_settings_get_one_clear_message(worker):
    client = WorkerClient(worker.url)
    with pytest.raises(WorkerError, match="no drafter swept has option 'suffix_max_depth'"):
        client.start_sweep(**BODY, options={"suffix_max_depth": [8]})
    with pytest.raises(WorkerError, match="temperatures must be between 0 and 10"):
        client.start_sweep(**{**BODY, "temperatures": [-1]})


@pytest.mark.slow  # starts its own worker process
def test_the_worker_publishes_its_url_beside_the_store_and_withdraws_it(tiny_folder, tmp_path):
    db = tmp_path / "own.duckdb"
    process = WorkerProcess(db, tiny_folder)
    process.wait_ready()
    assert published_url(db) == process.url
    assert json.loads(address_file(db).read_text())["pid"] == process.process.pid
    process.stop()
    assert not address_file(db).exists() and published_url(db) is None


def test_a_stale_address_file_is_ignored_and_removed(tmp_path, monkeypatch):
    db = tmp_path / "gone.duckdb"
    address_file(db).write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": 2**22 + 12345}))
    assert published_url(db) is None and not address_file(db).exists()
    monkeypatch.delenv("SPECSCOPE_WORKER_URL", raising=False)
    monkeypatch.setenv("SPECSCOPE_DB", str(db))
    address_file(db).write_text(json.dumps({"url": "http://127.0.0.1:4321", "pid": os.getpid()}))
    assert WorkerClient().url == "http://127.0.0.1:4321"  # found with nothing configured


def test_the_reference_is_imported_at_start_and_used_where_the_user_has_nothing(tiny, worker, tiny_folder):
    # on a store whose only sweeps are these tests' own (ngram at D 2), Acceptance's default counts
    # them and leaves the reference out; asked for, the reference is there, labelled
    def acceptance(**kinds) -> dict:
        return httpx.get(worker.url + "/aggregates/acceptance", params={"target": tiny_folder, **kinds}).json()

    def drafting_steps(aggregates: dict) -> Counter:
        return Counter(
            {(g["drafter"], g["draft_len"], g["tree_budget"]): g["drafting_steps"] for g in aggregates["pooled"]}
        )

    mine, reference, every = acceptance(), acceptance(kind=["reference"]), acceptance(kind=list(RUN_KINDS))
    [label] = mine["reference"]
    assert label.startswith("reference: ") and reference["reference"] == [label]
    assert {g["draft_len"] for g in reference["pooled"]} == {"2", "4"}
    own_kinds = [kind for kind in RUN_KINDS if kind != "reference"]
    assert drafting_steps(mine) == drafting_steps(acceptance(kind=own_kinds))  # the default: the user's own runs
    assert drafting_steps(every) == drafting_steps(mine) + drafting_steps(reference)  # the reference left out
    sweeps = httpx.get(worker.url + "/sweeps").json()
    assert [s["reference"] for s in sweeps if s["reference"]] == [label]
    bad = httpx.get(worker.url + "/aggregates/acceptance", params={"kind": ["bogus"]})
    assert bad.status_code == 422 and "kind: choose from" in bad.json()["error"]


@pytest.mark.slow  # starts its own worker process
def test_codesign_falls_back_to_the_reference_and_says_so(tiny, tiny_folder, tmp_path):
    reference = tmp_path / "reference"
    build_reference(tiny, reference, name=tiny_folder)
    process = WorkerProcess(tmp_path / "fresh.duckdb", tiny_folder, extra=["--reference", str(reference)])
    process.wait_ready()
    try:
        design = httpx.get(process.url + "/codesign", params={"drafter": "ngram"}).json()
        assert design["reference"].startswith("reference: ")
        assert design["measured"].keys() == {"2", "4"}
        client = WorkerClient(process.url)
        state, _ = wait_for(client, client.start_sweep(**BODY)["job_id"])
        assert state["status"] == "complete"
        own = httpx.get(process.url + "/codesign", params={"drafter": "ngram"}).json()
        assert own["reference"] is None and own["measured"].keys() == {"2"}
    finally:
        process.stop()
