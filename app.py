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
        st.Page("pages/history.py", title="History", icon=":material/history:"),
    ]
)
worker = connection.client()
health = connection.wait_until_ready(worker)
with st.sidebar:
    st.caption(
        f"worker {worker.url} · {', '.join(health['loaded']) or 'no model loaded'} · queue {health['queue_length']}"
    )
page.run()
