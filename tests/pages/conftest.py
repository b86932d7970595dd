"""A real worker (tiny random model) for the page tests; the pages find it via SPECSCOPE_WORKER_URL."""

from __future__ import annotations

import pytest

from tests.tiny import save_tiny
from tests.workers import WorkerProcess


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
