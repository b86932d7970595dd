"""Finding the worker: SPECSCOPE_WORKER_URL when it answers, else the running worker that holds the default
store (the URL it publishes beside the store: a second dashboard shares it instead of failing on the
store's lock), else a worker this app starts itself (`python -m backend worker` on a free loopback port,
stopped when the app exits). Waiting for it
shows progress while the model loads; problems become a message that says what to do."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from pathlib import Path

import streamlit as st

from backend.core.ports import free_loopback_port
from backend.serving.client import WorkerClient, WorkerError
from backend.serving.discovery import published_url

ROOT = Path(__file__).resolve().parent.parent


@st.cache_resource(show_spinner=False)
def _client_for(url: str | None) -> WorkerClient:
    return WorkerClient(url)


@st.cache_resource(show_spinner=False)
def _start_local_worker() -> str:
    port = free_loopback_port()
    process = subprocess.Popen([sys.executable, "-m", "backend", "worker", "--port", str(port)], cwd=ROOT)
    atexit.register(process.terminate)
    return f"http://127.0.0.1:{port}"


def client() -> WorkerClient:
    """The worker client for this app (cached across reruns and sessions). SPECSCOPE_NO_AUTOSTART=1
    keeps to the configured URL even when nothing answers there (the pages then say so)."""
    configured = os.environ.get("SPECSCOPE_WORKER_URL")
    if configured:
        candidate = _client_for(configured)
        if os.environ.get("SPECSCOPE_NO_AUTOSTART") == "1":
            return candidate
        try:
            candidate.health()
            return candidate
        except WorkerError:
            st.toast(f"No worker answers at {configured}; starting a local one.")
    running = published_url()
    if running:
        try:
            _client_for(running).health()
            return _client_for(running)
        except WorkerError:
            pass  # it published its URL but does not answer (yet, or any more): start our own
    return _client_for(_start_local_worker())


def wait_until_ready(worker: WorkerClient, timeout_s: float = 600.0) -> dict:
    """Poll /health until the worker has its models loaded, showing progress (naming the model) only while
    it is not; stop the page with a clear message if it never comes up. Call it after st.navigation, so the
    sidebar already lists the pages by title while this waits."""
    deadline = time.time() + timeout_s
    status = None
    while True:
        try:
            health = worker.health()
        except WorkerError as error:
            health = {"status": "starting", "problem": str(error)}
        if health["status"] == "ready":
            if status is not None:
                status.update(label=f"{health.get('loading_label') or 'The model'} is loaded", state="complete")
            if health.get("error"):
                st.warning(f"The worker could not load its default model: {health['error']}")
            return health
        if time.time() > deadline:
            st.error(health.get("problem") or "The worker is still loading its model; reload this page later.")
            st.stop()
        if status is None:
            status = st.status("Starting the SpecScope worker…", expanded=False)
        model = health.get("loading_label") or health.get("loading") or "the model"
        if health.get("warming"):
            step = health["warming"].partition(": ")[2] or health["warming"]
            status.update(
                label=f"Preparing {model}: {step}… (torch.compile, once per worker start: a few minutes on a "
                "small CPU; `SPECSCOPE_COMPILE=off make run` skips it)"
            )
        elif health["status"] == "loading":
            status.update(
                label=f"Loading {model}… (the first load of the embedded model converts its GGUF file, about 30 s)"
            )
        time.sleep(0.5)


def current_health(worker: WorkerClient, known: dict) -> dict:
    """The worker's health now, else what was `known` (a worker that stopped answering says so elsewhere)."""
    try:
        return worker.health()
    except WorkerError:
        return known


def show_progress(slot, record: dict) -> bool:
    """Show a waiting / loading / baseline record in `slot`; False for any other record type."""
    kind = record["type"]
    if kind == "queued":
        slot.info(f"Waiting for the worker: {record['position']} job(s) ahead.")
    elif kind == "loading":
        slot.info(f"Loading {record['spec']}…")
    elif kind == "baseline":
        slot.caption(
            f"plain decoding of this prompt, measured in this job ({record.get('how', 'plain')}): "
            f"{record['tokens_per_s']:.1f} tokens/s"
        )
    else:
        return False
    return True
