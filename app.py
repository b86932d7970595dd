"""SpecScope dashboard: a thin router. It lists the pages first (so the sidebar shows their titles from the
first render), then connects to the worker (SPECSCOPE_WORKER_URL, or one it starts itself), waits for the
model to load and runs the chosen page. Run with `make run`."""

import streamlit as st

from ui import connection

st.set_page_config(page_title="SpecScope", page_icon=":material/biotech:", layout="wide")

page = st.navigation(
    [
        st.Page("pages/live.py", title="Live", icon=":material/play_circle:", default=True),
        st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
        st.Page("pages/acceptance.py", title="Acceptance", icon=":material/task_alt:"),
        st.Page("pages/pareto.py", title="Pareto", icon=":material/scatter_plot:"),
        st.Page("pages/codesign.py", title="Co-design", icon=":material/architecture:"),
        st.Page("pages/sweep.py", title="Sweep", icon=":material/tune:"),
        st.Page("pages/history.py", title="History", icon=":material/history:"),
    ]
)
worker = connection.client()
health = connection.wait_until_ready(worker)


@st.fragment(run_every=3.0)
def worker_line() -> None:
    """The worker and its queue, read again every few seconds without rerunning the page (so a job
    stopped a moment ago is seen to leave the queue, and a running stream is never interrupted)."""
    now = connection.current_health(worker, health)
    st.caption(f"worker {worker.url} · {', '.join(now['loaded']) or 'no model loaded'} · queue {now['queue_length']}")


with st.sidebar:
    worker_line()
page.run()
