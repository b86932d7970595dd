"""How fast the analysis pages render from a big store: seeds a DuckDB file with 100k step rows
(synthetic runs of two drafters at several D across the suite's categories) and a sweep grid, starts a
worker on it, then times each page twice over: the page script's run under Streamlit's AppTest (the
worker's queries included), and, where Debian's chromium is installed, the time from opening the page
in a real browser to its first chart being drawn. Prints a table, then one JSON line.

    python scripts/bench_pages.py [--steps 100000] [--repeats 3]

Knows nothing about the pages beyond their paths; the numbers are this machine's, medians of repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.lab.store import RunStore  # noqa: E402
from tests.helpers.workers import WorkerProcess, start_dashboard  # noqa: E402

PAGES = {
    "pages/acceptance.py": ("Acceptance", "AL vs D"),
    "pages/pareto.py": ("Pareto", "Throughput vs interactivity"),
    "pages/codesign.py": ("Co-design", "Co-design: choosing D"),
    "pages/history.py": ("History", "Run history"),
}
CATEGORIES = ["coding", "code_editing", "summarization", "rag", "translation", "qa", "math", "writing"]
DRAFTERS = {"ngram": 0.55, "suffix": 0.6}  # per-draft acceptance probability of the synthetic runs
STEPS_PER_RUN = 100


def seed(path: Path, steps: int, target: str) -> None:
    """Runs of STEPS_PER_RUN steps each until `steps` rows, plus one sweep: 2 drafters x D {0,4,8} x B {1,4,16}."""
    store = RunStore(path)
    rng = random.Random(0)
    configs = [(name, d) for name in DRAFTERS for d in (2, 4, 8, "auto")]
    for number in range(steps // STEPS_PER_RUN):
        name, draft_len = configs[number % len(configs)]
        run_id = uuid.uuid4().hex
        store.start_run(
            {
                "run_id": run_id,
                "kind": "sweep",
                "turns": ["seeded"],
                "target": target,
                "drafter": name,
                "draft_len": draft_len,
                "category": CATEGORIES[number // len(configs) % len(CATEGORIES)],
            }
        )
        records = []
        for index in range(STEPS_PER_RUN):
            length = draft_len if isinstance(draft_len, int) else rng.randint(1, 8)
            accepted = 0
            while accepted < length and rng.random() < DRAFTERS[name]:
                accepted += 1
            records.append(
                {
                    "index": index,
                    "turn": 0,
                    "draft_len": length,
                    "drafted": list(range(length)),
                    "accepted": accepted,
                    "emitted": list(range(accepted + 1)),
                    "draft_s": 0.001,
                    "verify_s": 0.06 + 0.005 * length,
                }
            )
        store.add_steps(run_id, records)
        store.finish_run(run_id, status="complete")
    sweep_id = uuid.uuid4().hex
    store.start_sweep(sweep_id, target, "", "cpu", {"seeded": True})
    points = []
    for name, d, size in [("none", 0, b) for b in (1, 4, 16)] + [
        (n, d, b) for n in DRAFTERS for d in (4, 8) for b in (1, 4, 16)
    ]:
        al = 1 + sum(DRAFTERS.get(name, 0) ** k for k in range(1, d + 1))
        tpot = (0.06 + 0.005 * d) * (1 + 0.1 * size) / al
        points.append(
            {
                "drafter": name,
                "draft_len": d,
                "batch_size": size,
                "category": "all",
                "split": "all",
                "throughput_tps": size / tpot,
                "interactivity_tps": 1 / tpot,
                "al": al,
                "al_ci_low": al - 0.1,
                "al_ci_high": al + 0.1,
                "rho": 0.02,
                "lossless": True,
            }
        )
    store.add_sweep_points(sweep_id, points)
    store.finish_sweep(sweep_id, "complete")
    store.close()


def time_apptest(page: str, repeats: int) -> float:
    from streamlit.testing.v1 import AppTest

    seconds = []
    for _ in range(repeats):
        app = AppTest.from_file(str(ROOT / page), default_timeout=120)
        started = time.perf_counter()
        app.run()
        seconds.append(time.perf_counter() - started)
        if app.exception:
            raise RuntimeError(f"{page} raised: {app.exception[0].message}")
    return statistics.median(seconds)


def time_browser(worker_url: str, repeats: int) -> dict[str, dict[str, float]]:
    """Seconds until each page's first chart (History: its table) is drawn, two ways: clicking its link
    in the sidebar from the Live page (how people move between pages) and loading its URL afresh."""
    from playwright.sync_api import sync_playwright

    server, base = start_dashboard(worker_url)
    results: dict[str, dict[str, float]] = {"navigate": {}, "fresh_load": {}}
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(120_000)
            page.goto(base)
            page.get_by_text("Live speculative decoding").wait_for()
            for path, (link, title) in PAGES.items():
                chart = "[data-testid='stDataFrame']" if link == "History" else ".js-plotly-plot .main-svg"
                drawn = page.locator(chart)
                clicks, loads = [], []
                for _ in range(repeats):
                    page.get_by_role("link", name="Live").click()
                    page.get_by_text("Live speculative decoding").wait_for()
                    started = time.perf_counter()
                    page.get_by_role("link", name=link).click()
                    page.get_by_text(title).first.wait_for()
                    drawn.first.wait_for()
                    clicks.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    page.goto(f"{base}/{Path(path).stem}")
                    page.get_by_text(title).first.wait_for()
                    drawn.first.wait_for()
                    loads.append(time.perf_counter() - started)
                results["navigate"][path] = statistics.median(clicks)
                results["fresh_load"][path] = statistics.median(loads)
            browser.close()
    finally:
        server.terminate()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        db = Path(folder) / "big.duckdb"
        started = time.perf_counter()
        seed(db, args.steps, "default")
        print(f"seeded {args.steps} step rows in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        worker = WorkerProcess(db, "default")
        worker.wait_ready()
        os.environ.update({"SPECSCOPE_WORKER_URL": worker.url, "SPECSCOPE_NO_AUTOSTART": "1"})
        try:
            script = {page: time_apptest(page, args.repeats) for page in PAGES}
            browser = time_browser(worker.url, args.repeats) if Path("/usr/bin/chromium").exists() else {}
        finally:
            worker.stop()
    print(f"{'page':<22}{'script run (s)':>16}{'click link to chart (s)':>26}{'fresh load to chart (s)':>26}")
    for page in PAGES:
        shown = [f"{browser[way][page]:.2f}" if browser else "-" for way in ("navigate", "fresh_load")]
        print(f"{page:<22}{script[page]:>16.2f}{shown[0]:>26}{shown[1]:>26}")
    print(json.dumps({"step_rows": args.steps, "script_run_s": script, "browser_s": browser}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
