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
        st.Page("pages/sweep.py", title="Sweep", icon=":material/tune:"),
        st.Page("pages/history.py", title="History", icon="🗂️"),
    ]
)
with st.sidebar:
    st.caption(
        f"worker {worker.url} · {', '.join(health['loaded']) or 'no model loaded'} · queue {health['queue_length']}"
    )
page.run()
