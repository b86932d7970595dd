"""First start in a real browser (chromium, the embedded default model): on a fresh store holding
only a reference sweep, made by `bench reference` the way the shipped one is, Acceptance, Pareto and
Co-design each draw a chart; a sweep started from the Sweep page advances its progress bar and its
points then appear on Pareto beside the reference's; a sweep of a real llama.cpp server on loopback
(`bench sweep --engine llamacpp`, stored through the worker) then joins them on Pareto. Screenshots go
to artifacts/screenshots/."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.browser import BROWSER_TEST, SHOTS
from tests.helpers.llama_server import llama_server, ngram_template
from tests.helpers.workers import ROOT, WorkerProcess

pytestmark = BROWSER_TEST

# the Pareto chart's traces (plotly keeps them on its element): points of SpecScope's engine, the user's own
# or the reference's, and those of serving engines
POINTS = """(chart, reference) => chart.data
    .filter(t => t.name !== 'Pareto frontier' && t.legendgroup !== 'engines')
    .filter(t => t.name.endsWith('(reference)') === reference)
    .reduce((n, t) => n + t.x.length, 0)"""
ENGINE_POINTS = """(chart, name) => chart.data
    .filter(t => t.legendgroup === 'engines' && t.name.startsWith(name))
    .reduce((n, t) => n + t.x.length, 0)"""
PROGRESS = '[data-testid="stProgress"] [role="progressbar"]'


@pytest.fixture(scope="module")
def e2e_worker(tmp_path_factory):
    """A worker on a fresh store that imports a small reference of the default model at start (plain
    decoding and ngram at D 3, batch size 1, two prompts), built by the reference command."""
    folder = tmp_path_factory.mktemp("ref") / "reference"
    command = [sys.executable, "-m", "backend", "bench", "reference", "--out", str(folder), "--drafters", "ngram"]
    command += ["--draft-lens", "0,3", "--batch-sizes", "1", "--categories", "code_editing,qa"]
    command += ["--max-new-tokens", "16"]
    built = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "reference: " in built.stderr and sorted(p.name for p in folder.iterdir()) == [
        "runs.parquet",
        "steps.parquet",
        "sweep_points.parquet",
        "sweeps.parquet",
    ]
    db = tmp_path_factory.mktemp("db") / "fresh.duckdb"
    worker = WorkerProcess(db, "default", extra=["--reference", str(folder)])
    worker.wait_ready()
    yield worker
    worker.stop()


def open_page(page, name: str, heading: str) -> None:
    page.locator('[data-testid="stSidebarNav"]').get_by_role("link", name=name).click()
    page.get_by_role("heading", name=heading).first.wait_for()


def test_every_analysis_page_draws_the_reference_on_a_fresh_store(browser_page, e2e_worker):
    page = browser_page
    assert e2e_worker.url  # the fresh store's worker: no runs of the user's own
    open_page(page, "Acceptance", "Acceptance")
    page.get_by_text("No drafting steps of your own").wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    assert page.get_by_text("reference: ").count() > 0
    page.screenshot(path=str(SHOTS / "first_start_acceptance.png"), full_page=True)

    open_page(page, "Pareto", "Throughput vs interactivity")
    page.get_by_text("No sweep of your own").wait_for()
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for()
    page.wait_for_function(f"chart => ({POINTS})(chart, true) > 0", arg=chart.element_handle())
    assert chart.evaluate(f"chart => ({POINTS})(chart, false)") == 0
    page.screenshot(path=str(SHOTS / "first_start_pareto.png"), full_page=True)

    open_page(page, "Co-design", "Co-design")
    page.locator(".js-plotly-plot").first.wait_for()  # the measured curve: plain and ngram at B = 1
    page.screenshot(path=str(SHOTS / "first_start_codesign.png"), full_page=True)


def test_a_sweep_from_the_browser_shows_progress_and_lands_on_pareto(browser_page):
    page = browser_page
    open_page(page, "Sweep", "Sweep")
    page.get_by_role("button", name="Smallest sweep").click()
    page.wait_for_timeout(1000)
    page.get_by_role("button", name="Start sweep").click()
    bar = page.locator(PROGRESS).first
    bar.wait_for()
    seen = []
    done = page.get_by_text("stored: its points are on the Pareto")
    while done.count() == 0:
        value = bar.get_attribute("aria-valuenow") if bar.count() else None
        if value is not None and (not seen or seen[-1] != value):
            seen.append(value)
        page.wait_for_timeout(200)
    values = [float(v) for v in seen]
    assert len(values) >= 2 and values == sorted(values), seen  # it advanced, never back
    page.screenshot(path=str(SHOTS / "sweep.png"), full_page=True)

    open_page(page, "Pareto", "Throughput vs interactivity")
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for()
    page.wait_for_function(f"chart => ({POINTS})(chart, false) == 2", arg=chart.element_handle())
    assert chart.evaluate(f"chart => ({POINTS})(chart, true)") > 0  # the reference still overlaid
    page.screenshot(path=str(SHOTS / "sweep_on_pareto.png"), full_page=True)


def test_a_llamacpp_sweep_lands_on_pareto_beside_the_local_engines_points(browser_page, e2e_worker):
    page = browser_page
    open_page(page, "Live", "Live speculative decoding")
    open_page(page, "Pareto", "Throughput vs interactivity")
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for()
    before = {side: chart.evaluate(f"chart => ({POINTS})(chart, {side})") for side in ("true", "false")}

    command = [sys.executable, "-m", "backend", "bench", "sweep", "--engine", "llamacpp"]
    command += ["--launch", ngram_template(llama_server()), "--draft-lens", "4", "--method", "ngram-simple"]
    command += ["--concurrency", "1,2", "--categories", "code_editing,qa", "--per-category", "1"]
    command += ["--max-new-tokens", "24", "--target", "default", "--db", str(e2e_worker.db)]
    swept = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert swept.returncode == 0, swept.stderr[-2000:]
    assert f"stored by the worker at {e2e_worker.url}" in swept.stderr

    open_page(page, "Live", "Live speculative decoding")
    open_page(page, "Pareto", "Throughput vs interactivity")
    page.get_by_text("Open squares: serving engines").wait_for()
    chart = page.locator(".js-plotly-plot").first
    chart.wait_for()
    page.wait_for_function(
        f"chart => ({ENGINE_POINTS})(chart, 'llamacpp/ngram-simple · b11434') == 2", arg=chart.element_handle()
    )
    after = {side: chart.evaluate(f"chart => ({POINTS})(chart, {side})") for side in ("true", "false")}
    assert after == before and after["true"] > 0  # SpecScope's points (the reference's, any of yours) stay
    page.screenshot(path=str(SHOTS / "engine_on_pareto.png"), full_page=True)
