"""SpecScope dashboard: a thin router. It connects to the worker (SPECSCOPE_WORKER_URL, or one it
starts itself), waits for the model to load, then runs the chosen page. Run with `make run`."""

import streamlit as st

from ui import connection

st.set_page_config(page_title="SpecScope", page_icon="🔭", layout="wide")

worker = connection.client()
health = connection.wait_until_ready(worker)

page = st.navigation(
    [
        st.Page("pages/live.py", title="Live", icon="▶️", default=True),
        st.Page("pages/compare.py", title="Compare", icon="⚖️"),
        st.Page("pages/acceptance.py", title="Acceptance", icon="🎯"),
        st.Page("pages/pareto.py", title="Pareto", icon="📈"),
        st.Page("pages/codesign.py", title="Co-design", icon="📐"),
        st.Page("pages/history.py", title="History", icon="🗂️"),
    ]
)


@st.fragment(run_every=3.0)
def worker_line() -> None:
    """The worker and its queue, read again every few seconds without rerunning the page (so a job
    stopped a moment ago is seen to leave the queue, and a running stream is never interrupted)."""
    now = connection.current_health(worker, health)
    st.caption(f"worker {worker.url} · {', '.join(now['loaded']) or 'no model loaded'} · queue {now['queue_length']}")


with st.sidebar:
    worker_line()
page.run()
