"""Start a real worker process on loopback for tests (and the browser tests' servers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from backend.core.ports import free_loopback_port

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    def __init__(self, db: Path, target: str, token: str | None = None, extra: list[str] | None = None) -> None:
        self.port = free_loopback_port()
        self.db = db
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("SPECSCOPE_TOKEN", None)
        if token:
            env["SPECSCOPE_TOKEN"] = token
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.stderr_path = db.parent / f"worker-{self.port}.stderr"  # a file: a full pipe would stall the worker
        self.stderr = self.stderr_path.open("w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backend",
                "worker",
                "--port",
                str(self.port),
                "--db",
                str(db),
                "--default-target",
                target,
                *(extra or []),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self.stderr,
            text=True,
        )

    def wait_ready(self, timeout: float = 180) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited: {self.stderr_path.read_text()}")
            try:
                health = httpx.get(f"{self.url}/health", headers=self.headers, timeout=2).json()
                if health["status"] == "ready":
                    return
            except (httpx.TransportError, ValueError, KeyError):
                pass
            time.sleep(0.2)
        raise TimeoutError("worker did not become ready")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.stderr.close()


def start_dashboard(worker_url: str, timeout: float = 60) -> tuple[subprocess.Popen, str]:
    """The dashboard (`streamlit run app.py`, headless, on a free port) against the worker at `worker_url`,
    started and answering its health check; returns the process and its URL."""
    port = free_loopback_port()
    env = {**os.environ, "SPECSCOPE_WORKER_URL": worker_url, "SPECSCOPE_NO_AUTOSTART": "1"}
    command = [sys.executable, "-m", "streamlit", "run", "app.py", "--server.port", str(port)]
    command += ["--server.headless", "true", "--browser.gatherUsageStats", "false"]
    server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200:
                return server, url
        except httpx.TransportError:
            time.sleep(0.3)
    server.terminate()
    raise RuntimeError(f"the dashboard did not start within {timeout:.0f} s")
