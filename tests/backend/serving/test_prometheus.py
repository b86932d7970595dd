"""GET /metrics: the worker's served totals under vLLM's names, parsed with prometheus_client's own parser,
against what the runs' step records say, and read back by SpecScope's own vLLM adapter."""

from __future__ import annotations

import json
import threading

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from backend.engines import vllm
from backend.engines.adapters import VllmAdapter
from backend.engines.counts import EngineCounts
from backend.lab.served import ServedCounts
from backend.serving import prometheus
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import WorkerProcess

PROMPT = "w5 w9 w13 w5 w9 w13 w22 w5 w9"
COUNTERS = (vllm.DRAFTS, vllm.DRAFT_TOKENS, vllm.ACCEPTED_TOKENS, vllm.GENERATION_TOKENS)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Samples:
    """Every sample by (family name, sorted labels), through prometheus_client's parser; each family
    must be a counter whose samples carry vLLM's labels."""
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "counter", family.name
        for sample in family.samples:
            assert sample.name == family.name + "_total"
            assert set(vllm.LABELS) <= set(sample.labels) and sample.labels["engine"] == prometheus.ENGINE
            samples[family.name, tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, model: str, position: int | None = None) -> float:
    labels = {"engine": "0", "model_name": model} | ({"position": str(position)} if position is not None else {})
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_totals_render_under_vllms_names_and_plain_steps_add_no_drafts():
    served = ServedCounts()
    app = FastAPI()
    app.include_router(prometheus.router(served))
    client = TestClient(app)
    assert parse(client.get("/metrics").text) == {}  # nothing decoded yet: the families, no samples
    served.add_steps("m", [{"drafted": [7, 8, 9], "accepted": 2, "emitted": [7, 8, 4]}])
    plain, missed = {"drafted": [], "accepted": 0, "emitted": [5]}, {"drafted": [1], "accepted": 0, "emitted": [2]}
    served.add_steps("m", [plain, missed])
    served.add_steps("other", [{"drafted": [], "accepted": 0, "emitted": [3]}])
    reply = client.get("/metrics")
    assert reply.headers["content-type"].startswith("text/plain")
    samples = parse(reply.text)
    assert [value(samples, name, "m") for name in COUNTERS] == [2, 4, 2, 5]
    assert [value(samples, vllm.ACCEPTED_PER_POSITION, "m", k) for k in range(3)] == [1, 1, 0]
    assert [value(samples, name, "other") for name in COUNTERS] == [0, 0, 0, 1]  # plain: tokens, no drafts
    assert vllm.spec_decode_counts(reply.text) == EngineCounts(2, 4, 2, [1, 1, 0])


def test_totals_are_exact_when_fed_from_several_threads():
    served = ServedCounts()
    record = {"drafted": [1, 2], "accepted": 1, "emitted": [1, 2]}

    def feed() -> None:
        for _ in range(2000):
            served.add_steps("m", [record])

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    totals = served.snapshot()["m"]
    assert (totals.acceptance.drafts, totals.acceptance.accepted_tokens, totals.generated_tokens) == (8000, 8000, 16000)


@pytest.fixture(scope="module")
def worker(tiny, tmp_path_factory):
    folder = str(save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny"))
    process = WorkerProcess(tmp_path_factory.mktemp("db") / "runs.duckdb", folder)
    process.wait_ready()
    yield process, folder
    process.stop()


def generate(url: str, drafter: str) -> list[dict]:
    body = {"prompt": PROMPT, "drafter": drafter, "draft_len": 4, "max_new_tokens": 48}
    with httpx.stream("POST", url + "/generate", json=body, timeout=120) as reply:
        assert reply.status_code == 200, reply.read()
        return [json.loads(line) for line in reply.iter_lines() if line]


def scrape(url: str, earlier: Samples | None = None) -> Samples:
    """The worker's samples now, checked never to have gone down since `earlier`."""
    samples = parse(httpx.get(url + "/metrics").text)
    for key, before in (earlier or {}).items():
        assert samples[key] >= before, key
    return samples


def test_the_workers_counters_equal_the_runs_step_records(worker):
    process, model = worker
    before = scrape(process.url)
    records = generate(process.url, "ngram")
    after = scrape(process.url, before)
    steps = [r for r in records if r["type"] == "step"]
    baseline = next(r for r in records if r["type"] == "baseline")
    plain_steps = httpx.get(f"{process.url}/runs/{baseline['run_id']}").json()["steps"]  # the hidden plain lane
    drafting = [s for s in steps if s["drafted"]]
    assert drafting and not any(s["drafted"] for s in plain_steps)

    def delta(name: str, position: int | None = None) -> float:
        return value(after, name, model, position) - value(before, name, model, position)

    assert delta(vllm.DRAFTS) == len(drafting)
    assert delta(vllm.DRAFT_TOKENS) == sum(len(s["drafted"]) for s in steps)
    assert delta(vllm.ACCEPTED_TOKENS) == sum(s["accepted"] for s in steps) > 0
    assert [delta(vllm.ACCEPTED_PER_POSITION, k) for k in range(4)] == [
        sum(s["accepted"] > k for s in steps) for k in range(4)
    ]
    assert delta(vllm.GENERATION_TOKENS) == sum(len(s["emitted"]) for s in steps + plain_steps)

    records = generate(process.url, "none")  # plain decoding: tokens generated, no drafts
    plain = scrape(process.url, after)
    output = next(r for r in records if r["type"] == "summary")["output_ids"]
    assert [value(plain, name, model) for name in COUNTERS[:3]] == [value(after, name, model) for name in COUNTERS[:3]]
    assert value(plain, vllm.GENERATION_TOKENS, model) - value(after, vllm.GENERATION_TOKENS, model) == len(output) > 0


def test_the_vllm_adapter_reading_the_worker_finds_the_runs_acceptance(worker):
    process, _ = worker
    adapter = VllmAdapter()
    with httpx.Client(base_url=process.url, timeout=30) as http:
        before = adapter.read_counts(http) or EngineCounts(0, 0, 0)  # None until the worker has decoded
        records = generate(process.url, "suffix")
        after = adapter.read_counts(http)
    summary = next(r for r in records if r["type"] == "summary")
    stats = after.minus(before).counter().stats()
    assert stats.drafting_steps == summary["drafting_steps"] > 0
    assert stats.al == pytest.approx(summary["al"])
    assert stats.acceptance_rate == pytest.approx(summary["acceptance_rate"])
    width = len(stats.survival)  # the worker's positions so far: this run's, then zeros
    assert stats.survival == pytest.approx(summary["survival"] + [0.0] * (width - len(summary["survival"])))
