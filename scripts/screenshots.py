"""Screenshots of every dashboard page as a first-time user sees it, for the README: starts a worker on a
fresh temporary store (which imports the shipped reference data on its first start) and the dashboard,
opens each page listed in the sidebar in Debian's chromium (driven by Playwright; never a downloaded
browser), then runs one suite prompt on the Live page, and saves docs/images/<page>.png (plus live_run.png)
at a fixed width, each as tall as the page; then the same prompt with a token tree (`--tree-budget`),
saved as live_tree.png with the page's drawing of one step's tree.

    python scripts/screenshots.py [--target default] [--out docs/images] [--category code_editing]
        [--tree-budget 16] [--tree-depth 8] [--live-tree-only]

Knows nothing about what the pages show beyond their titles in the sidebar and the Live page's prompt
picker and Run button; it waits for the app to finish running each page before taking its picture.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.lab.prompts import DEFAULT_SUITE, load_suite  # noqa: E402
from tests.helpers.workers import WorkerProcess, start_dashboard  # noqa: E402
from ui.forms import D_CHOICES, TREE_BUDGETS  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
NAV_LINKS = '[data-testid="stSidebarNavLink"]'
# each link's text without its icon (a Material icon is drawn from its name: "history" and the like)
LINK_TITLES = """links => links.map(link => {
    const copy = link.cloneNode(true);
    copy.querySelectorAll('[data-testid="stIconMaterial"], [data-testid="stIconEmoji"]').forEach(i => i.remove());
    return copy.textContent.trim();
})"""
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def settle(page, wait_ms: int) -> None:
    """Until the page's script has finished (streamed runs included) and its charts have been drawn."""
    page.wait_for_timeout(500)  # the rerun a click or a navigation asks for starts within this
    page.locator(IDLE).wait_for()
    page.wait_for_timeout(wait_ms)


def snap(page, path: Path, width: int, height: int) -> None:
    """The whole page: Streamlit scrolls inside its main block, so the viewport is made as tall as that
    block's content for the picture (at least `height`), then set back."""
    content = page.evaluate("""() => document.querySelector('[data-testid="stMain"]').scrollHeight""")
    page.set_viewport_size({"width": width, "height": max(height, int(content))})
    page.wait_for_timeout(800)  # the charts redraw at the new size
    page.screenshot(path=str(path))
    page.set_viewport_size({"width": width, "height": height})


def slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", title.lower())


def run_live_prompt(page, category: str, wait_ms: int) -> str:
    """Pick the suite's first prompt of `category` on the Live page and run it with the page's defaults."""
    question = next(q for q in load_suite(DEFAULT_SUITE) if q.category == category)
    picker = page.get_by_role("combobox", name="From the prompt suite")
    picker.click()
    picker.fill(f"{question.question_id} · {category}")
    page.get_by_role("option", name=re.compile(rf"^{question.question_id} · {category}")).first.click()
    settle(page, 300)
    page.get_by_role("button", name="Run", exact=True).click()
    settle(page, wait_ms)
    if page.locator(".ss-out span").count() == 0:
        raise RuntimeError("the Live run drew no tokens")
    return question.turns[0]


def move_slider(page, label: str, presses: int) -> None:
    """Move the Live page's slider called `label` by `presses` steps with the keyboard (left if < 0)."""
    thumb = page.locator('[data-testid="stSlider"]').filter(has_text=label).get_by_role("slider")
    thumb.focus()
    for _ in range(abs(presses)):
        thumb.press("ArrowRight" if presses > 0 else "ArrowLeft")
    settle(page, 300)


def set_tree(page, budget: int, draft_len: int) -> None:
    """A token tree of `budget` drafts at most `draft_len` deep, from the page's defaults (no tree, D auto)."""
    move_slider(page, "Draft length D", draft_len - len(D_CHOICES) + 1)
    move_slider(page, "Tree budget", TREE_BUDGETS.index(budget))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="default", help="the worker's default target (a folder, a hub id)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    parser.add_argument("--category", default="code_editing", help="the suite category of the Live run's prompt")
    parser.add_argument("--width", type=int, default=1440)
    parser.add_argument("--height", type=int, default=900)
    parser.add_argument("--timeout-s", type=int, default=600, help="the longest wait for one page or the run")
    parser.add_argument("--chart-wait-ms", type=int, default=1500, help="pause after a page settles")
    parser.add_argument("--tree-budget", type=int, choices=TREE_BUDGETS[1:], default=16, help="the tree run's budget")
    parser.add_argument("--tree-depth", type=int, choices=range(1, 17), default=8, help="the tree run's D")
    parser.add_argument("--live-tree-only", action="store_true", help="only the Live run with a token tree")
    args = parser.parse_args()
    if not CHROMIUM.exists():
        sys.exit(f"{CHROMIUM} is missing: install Debian's chromium (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="specscope-shots-") as folder:
        worker = WorkerProcess(Path(folder) / "store.duckdb", args.target)
        server = None
        try:
            worker.wait_ready(timeout=900)
            server, url = start_dashboard(worker.url)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
                page = browser.new_page(viewport={"width": args.width, "height": args.height})
                page.set_default_timeout(args.timeout_s * 1000)
                page.goto(url)
                links = page.locator(NAV_LINKS)
                links.filter(has_text="Live").first.wait_for()  # the titled pages, not the folder's file names
                settle(page, 300)
                titles = links.evaluate_all(LINK_TITLES)
                for index, title in enumerate([] if args.live_tree_only else titles):
                    links.nth(index).click()
                    settle(page, args.chart_wait_ms)
                    path = args.out / f"{slug(title)}.png"
                    snap(page, path, args.width, args.height)
                    print(f"{path}: {title}", flush=True)
                links.nth(titles.index("Live")).click()
                settle(page, 300)
                if not args.live_tree_only:
                    prompt = run_live_prompt(page, args.category, args.chart_wait_ms)
                    path = args.out / "live_run.png"
                    snap(page, path, args.width, args.height)
                    print(f"{path}: a Live run of {prompt[:60]!r}", flush=True)
                set_tree(page, args.tree_budget, args.tree_depth)
                prompt = run_live_prompt(page, args.category, args.chart_wait_ms)
                if page.locator(".ss-out .ss-fan").count() == 0:
                    raise RuntimeError("the Live run with a tree budget drew no tree step")
                path = args.out / "live_tree.png"
                snap(page, path, args.width, args.height)
                print(f"{path}: a Live run with a token tree of {args.tree_budget} of {prompt[:60]!r}", flush=True)
                browser.close()
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
            worker.stop()


if __name__ == "__main__":
    main()
