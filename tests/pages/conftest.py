"""A real worker (tiny random model) for the page tests; the pages find it via SPECSCOPE_WORKER_URL.
For the browser tests: a worker serving the embedded default model (`e2e_worker`; a test module may
define its own, and `dashboard` and `browser_page` then use that one), the dashboard against it, and
a chromium page on the dashboard."""

from __future__ import annotations

import pytest

from backend.serving.client import WorkerClient
from tests.helpers.browser import CHROMIUM, SHOTS
from tests.helpers.tiny import save_tiny
from tests.helpers.workers import WorkerProcess, start_dashboard


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


@pytest.fixture(scope="module")
def e2e_worker(tmp_path_factory):
    worker = WorkerProcess(tmp_path_factory.mktemp("db") / "e2e.duckdb", "default")
    worker.wait_ready()
    yield worker
    worker.stop()


@pytest.fixture(scope="module")
def dashboard(e2e_worker):
    server, url = start_dashboard(e2e_worker.url)
    yield url
    server.terminate()


@pytest.fixture(scope="module")
def browser_page(dashboard):
    from playwright.sync_api import sync_playwright

    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
            ],
        )
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.set_default_timeout(120_000)
        page.goto(dashboard)
        page.get_by_text("Live speculative decoding").wait_for()
        yield page
        browser.close()
