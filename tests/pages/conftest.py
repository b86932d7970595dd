"""A real worker (tiny random model) for the page tests; the pages find it via SPECSCOPE_WORKER_URL."""

from __future__ import annotations

import pytest

from backend.serving.client import WorkerClient
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import WorkerProcess


@pytest.fixture(scope="session")
def page_worker(tiny, tmp_path_factory):
    folder = save_tiny(tiny, tmp_path_factory.mktemp("models") / "tiny")
    worker = WorkerProcess(tmp_path_factory.mktemp("db") / "pages.duckdb", str(folder))
    worker.wait_ready()
    yield worker
    worker.stop()


@pytest.fixture
def worker_env(page_worker, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", page_worker.url)
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")
    return page_worker


@pytest.fixture(scope="session")
def swept_worker(page_worker):
    """The page worker with one stored sweep (plain and ngram at D 2 and 4, batch sizes 1 and 2)."""
    client = WorkerClient(page_worker.url)
    questions = [
        {
            "question_id": i,
            "category": "copy" if i % 2 else "chat",
            "turns": [" ".join(f"w{(i * 5 + j) % 9 + 5}" for j in range(14))],
        }
        for i in range(4)
    ]
    records = list(
        client.sweep(
            questions=questions, drafters=["ngram"], draft_lens=[0, 2, 4], batch_sizes=[1, 2], max_new_tokens=16
        )
    )
    assert records[-1]["type"] == "sweep"
    client.close()
    return page_worker


@pytest.fixture
def swept_env(swept_worker, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_WORKER_URL", swept_worker.url)
    monkeypatch.setenv("SPECSCOPE_NO_AUTOSTART", "1")
    return swept_worker
