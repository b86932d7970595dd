"""The dashboard's worker lookup: with no URL configured, a dashboard uses the running worker that holds
the default store (the URL it publishes beside the store) rather than starting a second worker that would
fail on the store's lock; with none running it starts its own."""

from __future__ import annotations

import pytest

from ui import connection


@pytest.fixture
def no_configured_url(monkeypatch):
    monkeypatch.delenv("SPECSCOPE_WORKER_URL", raising=False)
    monkeypatch.delenv("SPECSCOPE_NO_AUTOSTART", raising=False)
    started: list[str] = []

    def start_local_worker() -> str:
        started.append("local")
        return "http://127.0.0.1:9"  # nothing is started; the test only sees that it was asked for

    monkeypatch.setattr(connection, "_start_local_worker", start_local_worker)
    return started


def test_a_second_dashboard_uses_the_worker_that_holds_the_store(page_worker, no_configured_url, monkeypatch):
    monkeypatch.setenv("SPECSCOPE_DB", str(page_worker.db))
    assert connection.client().url == page_worker.url
    assert no_configured_url == []


@pytest.mark.slow
def test_with_no_worker_running_the_dashboard_starts_its_own(no_configured_url, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECSCOPE_DB", str(tmp_path / "empty.duckdb"))
    assert connection.client().url == "http://127.0.0.1:9"
    assert no_configured_url == ["local"]
