"""The worker API against a real worker process on loopback (a tiny model folder as the target)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from backend.core.cpu_features import cpu_features
from tests.helpers.workers import ROOT, WorkerProcess

pytestmark = pytest.mark.slow  # starts worker processes: `make test-fast` leaves it out

PROMPT = "w5 w9 w13 w5 w9 w13 w22"


def stream(worker, path: str, body: dict, headers: dict | None = None) -> list[dict]:
    with httpx.stream("POST", worker.url + path, json=body, headers=headers or worker.headers, timeout=120) as reply:
        assert reply.status_code == 200, reply.read()
        return [json.loads(line) for line in reply.iter_lines() if line]


def test_health_and_models(worker, tiny_folder):
    health = httpx.get(worker.url + "/health").json()
    assert health["status"] == "ready" and tiny_folder in health["loaded"]
    assert health["loading_label"] == tiny_folder  # what the dashboard's loading message names
    models = httpx.get(worker.url + "/models").json()
    [target] = models["targets"]
    assert target["spec"] == tiny_folder and target["facts"]["G"] == 2 and target["facts"]["num_layers"] == 4
    assert target["precision"] == {"dtype": "float32", "cpu_features": list(cpu_features())}
    assert {d["name"] for d in models["drafters"]} >= {"none", "ngram", "suffix", "draft-model", "layerskip"}


def test_generate_streams_start_steps_baseline_summary_and_stores_the_run(worker):
    records = stream(worker, "/generate", {"prompt": PROMPT, "drafter": "ngram", "draft_len": 4, "max_new_tokens": 40})
    types = [r["type"] for r in records]
    assert types[0] == "start" and types[-1] == "summary" and "baseline" in types
    steps = [r for r in records if r["type"] == "step"]
    assert len(steps) >= 2 and types.index("baseline") > max(i for i, t in enumerate(types) if t == "step")
    assert [s["index"] for s in steps] == list(range(len(steps)))
    summary = records[-1]
    assert [t for s in steps for t in s["emitted"]] == summary["output_ids"]
    assert summary["speedup"] == pytest.approx(summary["tokens_per_s"] / summary["baseline_tokens_per_s"])
    assert steps[-1]["running"]["new_tokens"] == len(summary["output_ids"])
    stored = httpx.get(f"{worker.url}/runs/{summary['run_id']}").json()
    assert stored["status"] == "complete" and stored["drafter"] == "ngram" and stored["draft_len"] == "4"
    assert [s["emitted"] for s in stored["steps"]] == [s["emitted"] for s in steps]
    assert stored["steps"][0]["emitted_text"] and stored["turns"] == [PROMPT]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert stored["specscope_version"] == "0.1.0" and stored["git_commit"] == head


def test_a_compiling_worker_says_so_then_stores_compiled_runs(tiny_folder, tmp_path):
    compiling = WorkerProcess(tmp_path / "c.duckdb", tiny_folder, extra=["--compile", "on"])
    try:
        said = set()
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                health = httpx.get(compiling.url + "/health", timeout=2).json()
            except httpx.TransportError:
                time.sleep(0.1)
                continue
            said.add(health["warming"])
            if health["status"] == "ready":
                break
            time.sleep(0.1)
        assert health["status"] == "ready" and health["warming"] is None
        assert f"{tiny_folder}: compiling the target's verify pass" in said
        records = stream(
            compiling, "/generate", {"prompt": PROMPT, "drafter": "ngram", "draft_len": 3, "max_new_tokens": 20}
        )
        summary = records[-1]
        stored = httpx.get(f"{compiling.url}/runs/{summary['run_id']}").json()
        assert stored["compile"] == "on" and stored["status"] == "complete"
        baseline = httpx.get(f"{compiling.url}/runs", params={"kind": "baseline"}).json()
        assert [run["compile"] for run in baseline] == ["on"]  # the plain run it is compared with: same path
    finally:
        compiling.stop()


def test_every_job_measures_its_own_plain_baseline(worker):
    body = {"prompt": "w30 w31 w32", "drafter": "suffix", "draft_len": 2, "max_new_tokens": 20}
    first = [r for r in stream(worker, "/generate", body) if r["type"] == "baseline"]
    second = [r for r in stream(worker, "/generate", body) if r["type"] == "baseline"]
    assert len(first) == len(second) == 1 and first[0]["run_id"] != second[0]["run_id"]
    assert first[0]["how"] == second[0]["how"] == "interleaved" and second[0]["measured_at"]


def test_compare_streams_lanes_together_and_replay(worker):
    body = {
        "prompt": PROMPT,
        "max_new_tokens": 30,
        "replay": True,
        "lanes": [{"drafter": "ngram", "draft_len": 2}, {"drafter": "suffix", "draft_len": 6}],
    }
    records = stream(worker, "/compare", body)
    steps = [r for r in records if r["type"] == "step"]
    lanes_in_order = [s["lane"] for s in steps[:4]]
    assert lanes_in_order == [0, 1, 0, 1]  # interleaved, not one lane after the other
    summaries = [r for r in records if r["type"] == "summary"]
    assert {s["lane"] for s in summaries} == {0, 1}
    assert summaries[0]["output_ids"] == summaries[1]["output_ids"]  # replay: both score one rollout
    groups = {httpx.get(f"{worker.url}/runs/{s['run_id']}").json()["group_id"] for s in summaries}
    assert len(groups) == 1 and None not in groups


def test_eight_concurrent_clients_are_all_served_in_order(worker):
    starts: dict[int, float] = {}
    queued: dict[int, list[int]] = {}

    def client(number: int) -> None:
        body = {"prompt": PROMPT, "drafter": "none", "draft_len": 0, "max_new_tokens": 300, "baseline": False}
        with httpx.stream("POST", worker.url + "/generate", json=body, timeout=300) as reply:
            for line in reply.iter_lines():
                record = json.loads(line)
                if record["type"] == "queued":
                    queued.setdefault(number, []).append(record["position"])
                if record["type"] == "start":
                    starts[number] = time.perf_counter()

    threads = []
    for number in range(8):
        threads.append(threading.Thread(target=client, args=(number,)))
        threads[-1].start()
        time.sleep(0.1)  # a definite arrival order
    for thread in threads:
        thread.join(timeout=300)
    assert sorted(starts) == list(range(8))
    assert sorted(starts, key=starts.get) == list(range(8))  # first come, first served
    assert queued.get(7) and queued[7][0] >= 1 and queued[7] == sorted(queued[7], reverse=True)


def test_a_client_that_disconnects_cancels_its_job(worker):
    body = {"prompt": PROMPT, "drafter": "none", "draft_len": 0, "max_new_tokens": 2000, "baseline": False}
    with httpx.stream("POST", worker.url + "/generate", json=body, timeout=60) as reply:
        lines = reply.iter_lines()
        run_id = json.loads(next(lines))["run_id"]
        for _ in range(3):
            next(lines)
    deadline = time.time() + 20
    status = None
    while time.time() < deadline:
        status = httpx.get(f"{worker.url}/runs/{run_id}").json()["status"]
        if status == "cancelled":
            break
        time.sleep(0.2)
    assert status == "cancelled"
    # the compute thread is free again: the next job starts without waiting in line
    records = stream(worker, "/generate", {"prompt": PROMPT, "max_new_tokens": 5, "baseline": False})
    assert "queued" not in [record["type"] for record in records] and records[-1]["type"] == "summary"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "prompt is empty"),
        ({"prompt": ""}, "prompt is empty"),
        ({"prompt": "   "}, "prompt is empty"),
        ({"prompt": "w5", "max_new_tokens": "many"}, "max_new_tokens"),
        ({"prompt": "w5", "draft_len": 99}, "between 0 and 64"),
        ({"prompt": "w5", "draft_len": -1}, "between 0 and 64"),
        (
            {"prompt": "w5", "draft_len": "soon"},
            "draft_len: draft_len must be an integer between 0 and 64, or 'auto', got 'soon'",
        ),
        ({"prompt": "w5", "drafter": "oracle"}, "unknown drafter"),
        ({"prompt": "w5", "temperature": -1}, "temperature"),
        ({"prompt": "w5 " * 30_000}, "too long"),
        ({"messages": []}, "prompt is empty"),
        ({"prompt": "w5 \ud800"}, "prompt: text must be valid UTF-8"),
        ({"messages": ["w5", "w6\x00"]}, "messages.1: text must not contain NUL"),
        ({"prompt": "w5", "seed": 2**80}, "seed: integers must fit in 64 bits"),
        ({"prompt": "w5", "top_k": 2**40}, "top_k"),
        ({"prompt": "w5", "temperature": float("nan")}, "temperature"),
        ({"prompt": "w5", "temperature": 1.0, "top_p": 5e-324}, "top_p"),
        ({"prompt": "w5", "target": "x" * 300}, "target: names must be at most"),
        ({"prompt": "w5", "drafter": "eagle3", "drafter_path": "/a/" + "b" * 300}, "drafter_path: names must be"),
        ({"prompt": "w5", "stop": ["\udfff"]}, "stop.0: text must be valid UTF-8"),
        ({"prompt": "w5", "tree_budget": -1}, "tree_budget"),
        ({"prompt": "w5", "tree_budget": 65}, "tree_budget"),
        ({"prompt": "w5", "tree_budget": 8, "tree_topk": 0}, "tree_topk"),
        ({"prompt": "w5", "drafter": "none", "tree_budget": 8}, "drafter 'none' drafts no token trees"),
        ({"prompt": "w5", "min_confidence": -0.1}, "min_confidence"),
        ({"prompt": "w5", "min_confidence": 1.0}, "min_confidence"),
        ({"prompt": "w5", "stop": [""]}, "stop: a stop string is empty"),
        ({"prompt": "w5", "stop": ["w9"] * 17}, "stop"),
        ({"prompt": "w5", "drafter": "ngram", "ngram_min": 5, "ngram_max": 2}, "ngram_min must be at most ngram_max"),
    ],
)
def test_bad_requests_get_a_json_4xx(worker, body, message):
    reply = httpx.post(worker.url + "/generate", content=json.dumps(body), headers={"content-type": "application/json"})
    assert 400 <= reply.status_code < 500
    assert message in reply.json()["error"]


@pytest.mark.parametrize(
    ("path", "body", "message"),
    [
        (
            "/compare",
            {"prompt": "w5", "lanes": [{"drafter": "ngram"}, {"drafter": "draft-model", "draft_model": "m\ud800"}]},
            "lanes.1.draft_model: text must be valid UTF-8",
        ),
        (
            "/sweeps",
            {
                "questions": [{"question_id": 1, "turns": ["w5"]}],
                "drafters": ["ngram"],
                "draft_lens": [2],
                "batch_sizes": [1],
                "settings": {"note": float("inf")},
            },
            "settings.note: numbers must be finite",
        ),
        (
            "/sweeps",
            {
                "questions": [{"question_id": 2**70, "turns": ["w5"]}],
                "drafters": ["ngram"],
                "draft_lens": [2],
                "batch_sizes": [1],
            },
            "questions.0.question_id: integers must fit in 64 bits",
        ),
        (
            "/sweeps",
            {
                "questions": [{"question_id": 1, "turns": ["w5"]}],
                "drafters": ["ngram"],
                "draft_lens": [2],
                "batch_sizes": [1],
                "min_confidences": [0, 1.5],
            },
            "confidence stops must be at least 0 and below 1",
        ),
        (
            "/sweeps",
            {
                "questions": [{"question_id": 1, "turns": [" "]}],
                "drafters": ["ngram"],
                "draft_lens": [2],
                "batch_sizes": [1],
            },
            "questions.0.turns: a turn is empty",
        ),
    ],
)
def test_bad_values_anywhere_in_a_body_get_a_json_4xx(worker, path, body, message):
    reply = httpx.post(worker.url + path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert reply.status_code == 422 and message in reply.json()["error"]


@pytest.mark.parametrize(
    ("content", "message"), [(b"", "the request needs a JSON body"), (b"{not json", "the body is not valid JSON")]
)
def test_a_missing_or_broken_body_is_named_as_such(worker, content, message):
    reply = httpx.post(worker.url + "/generate", content=content, headers={"content-type": "application/json"})
    assert reply.status_code == 422 and reply.json()["error"] == message


@pytest.mark.parametrize(
    ("path", "params", "message"),
    [
        ("/runs", {"limit": -1}, "limit"),
        ("/runs", {"limit": 10**30}, "limit"),
        ("/runs", {"since": "notadate"}, "since"),
        ("/runs", {"until": "0001-01-01T00:00:00+14:00"}, "until: the time must fall between"),
        ("/codesign", {"target": "m" * 300}, "target: names must be at most"),
    ],
)
def test_bad_query_parameters_get_a_json_4xx(worker, path, params, message):
    reply = httpx.get(worker.url + path, params=params)
    assert reply.status_code == 422 and message in reply.json()["error"]


def test_runs_since_a_zoned_time_compare_in_utc(worker):
    stream(worker, "/generate", {"prompt": "w44 w45", "max_new_tokens": 4, "baseline": False})
    newest = httpx.get(worker.url + "/runs", params={"limit": 1}).json()[0]["created_at"]  # naive UTC
    same_moment_elsewhere = (
        datetime.fromisoformat(newest).replace(tzinfo=UTC).astimezone(timezone(timedelta(hours=5))).isoformat()
    )
    since = httpx.get(worker.url + "/runs", params={"since": same_moment_elsewhere}).json()
    assert newest in [run["created_at"] for run in since]


def test_compare_needs_two_to_four_lanes(worker):
    reply = httpx.post(worker.url + "/compare", json={"prompt": "w5", "lanes": [{"drafter": "ngram"}]})
    assert reply.status_code == 422 and "lanes" in reply.json()["error"]


def test_unknown_model_and_context_overflow_are_error_records(worker):
    records = stream(worker, "/generate", {"prompt": "w5", "target": "/no/such/model"})
    assert records[-1]["type"] == "error" and "no such model folder" in records[-1]["message"]
    records = stream(worker, "/generate", {"prompt": " ".join(["w7"] * 600)})
    assert records[-1]["type"] == "error" and "context" in records[-1]["message"]
    failed = httpx.get(worker.url + "/runs", params={"status": "failed"}).json()
    assert failed and all(run["error"] for run in failed)


def test_requests_jobs_and_their_outcomes_are_logged_beside_the_store(worker):
    stream(
        worker,
        "/generate",
        {"prompt": "w50 w51", "drafter": "ngram", "draft_len": 2, "max_new_tokens": 4, "baseline": False},
    )
    stream(worker, "/generate", {"prompt": "w5", "target": "/no/such/model"})
    httpx.get(worker.url + "/runs", params={"limit": -1})
    lines = (worker.db.parent / "worker.log").read_text().splitlines()
    assert any(line.endswith(" ms") and "POST /generate 200" in line for line in lines)
    assert any("GET /runs 422" in line for line in lines)
    ended = [line for line in lines if "ended: generate, drafter ngram" in line]
    assert ended and ended[-1].endswith(", complete")
    assert any("ended: generate" in line and "failed: no such model folder" in line for line in lines)


def test_runs_are_listed_with_filters(worker):
    stream(
        worker,
        "/generate",
        {
            "prompt": "w40 w41",
            "drafter": "ngram",
            "draft_len": 2,
            "max_new_tokens": 8,
            "category": "coding",
            "baseline": False,
        },
    )
    runs = httpx.get(worker.url + "/runs", params={"drafter": "ngram", "category": "coding"}).json()
    assert runs and all(r["drafter"] == "ngram" and r["category"] == "coding" for r in runs)
    assert httpx.get(worker.url + "/runs/not-a-run").status_code == 404


def test_token_auth(tiny_folder, tmp_path):
    secured = WorkerProcess(tmp_path / "auth.duckdb", tiny_folder, token="s3cret")
    try:
        secured.wait_ready()
        refused = httpx.get(secured.url + "/health")
        assert refused.status_code == 401 and "bearer token" in refused.json()["error"]
        assert httpx.get(secured.url + "/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        records = stream(secured, "/generate", {"prompt": "w5 w6", "max_new_tokens": 4, "baseline": False})
        assert records[-1]["type"] == "summary"
    finally:
        secured.stop()


def test_non_loopback_bind_without_a_token_is_refused(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "backend", "worker", "--host", "0.0.0.0", "--db", str(tmp_path / "x.duckdb")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "SPECSCOPE_TOKEN"},
    )
    assert result.returncode == 2 and "SPECSCOPE_TOKEN" in result.stderr


def test_a_sweep_through_the_worker_is_stored_and_analysed_there(worker, tiny_folder, tmp_path):
    suite = tmp_path / "suite.jsonl"
    suite.write_text(
        "".join(
            json.dumps({"question_id": i, "category": "copy" if i % 2 else "chat", "turns": [PROMPT + f" w{i + 30}"]})
            + "\n"
            for i in range(4)
        )
    )
    env = {**os.environ, "SPECSCOPE_WORKER_URL": worker.url}
    command = [
        sys.executable,
        "-m",
        "backend",
        "bench",
        "sweep",
        "--suite",
        str(suite),
        "--drafters",
        "ngram",
        "--draft-lens",
        "0,2,4",
        "--batch-sizes",
        "1,2",
        "--max-new-tokens",
        "12",
        "--json",
        "--target",
        tiny_folder,
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr
    assert f"stored by the worker at {worker.url}" in done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert len(report["points"]) == 2 * 3 and all(p["lossless"] for p in report["points"])

    [sweep] = [s for s in httpx.get(worker.url + "/sweeps").json() if s["sweep_id"] == report["sweep_id"]]
    assert sweep["status"] == "complete" and sweep["target"] == tiny_folder
    points = httpx.get(worker.url + "/sweeps/points", params={"sweep_id": report["sweep_id"]}).json()
    overall = [p for p in points if p["category"] == "all" and p["split"] == "all"]
    assert {(p["drafter"], p["draft_len"], p["batch_size"]) for p in overall} == {
        (name, d, b) for name, d in (("none", "0"), ("ngram", "2"), ("ngram", "4")) for b in (1, 2)
    }
    assert {p["category"] for p in points} == {"all", "chat", "copy"}

    groups = httpx.get(worker.url + "/aggregates/acceptance", params={"target": tiny_folder, "drafter": "ngram"}).json()
    by_length = {g["draft_len"]: g for g in groups["pooled"]}
    assert {g["category"] for g in groups["by_category"]} >= {"chat", "copy"}
    assert (
        sum(g["drafting_steps"] for g in groups["by_category"] if g["draft_len"] == "4")
        == by_length["4"]["drafting_steps"]
    )
    assert {"2", "4"} <= by_length.keys()
    four = by_length["4"]
    assert four["al_ci_low"] <= four["al"] <= four["al_ci_high"] and len(four["survival"]) == 4
    assert sum(four["histogram"]) == four["drafting_steps"]
    assert four["al"] == pytest.approx(1 + sum(j * n for j, n in enumerate(four["histogram"])) / four["drafting_steps"])

    design = httpx.get(worker.url + "/codesign", params={"target": tiny_folder, "drafter": "ngram"}).json()
    assert design["G"] == 2 and design["d_start"] == 63 and design["d_ladder"] == [63]
    assert design["measured"].keys() == design["predicted"].keys() == {"2", "4"}
    assert design["recommended_d"].keys() == {"1", "2"}
    bad = httpx.get(worker.url + "/codesign", params={"target": "/no/such/model"})
    assert bad.status_code == 422 and "error" in bad.json()
