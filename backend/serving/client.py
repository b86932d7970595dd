"""The small HTTP client the dashboard (and scripts) use to talk to the worker.

Streams come back as iterators of record dicts; closing an iterator (or abandoning it) closes the
connection, which the worker takes as a cancel. Errors become `WorkerError` with a message a person
can act on. Knows nothing about Streamlit.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import httpx

from backend.serving.discovery import published_url

DEFAULT_URL = "http://127.0.0.1:8765"


class WorkerError(Exception):
    """The worker refused a request or could not be reached; the message says what to do."""


class WorkerClient:
    def __init__(self, url: str | None = None, token: str | None = None, timeout: float = 10.0) -> None:
        """`url`, else $SPECSCOPE_WORKER_URL, else the URL the worker holding the default store published
        beside it (discovery.py), else the default port."""
        self.url = (url or os.environ.get("SPECSCOPE_WORKER_URL") or published_url() or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get("SPECSCOPE_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def health(self) -> dict:
        return self._get("/health")

    def models(self) -> dict:
        return self._get("/models")

    def runs(self, **filters) -> list[dict]:
        return self._get("/runs", params={k: v for k, v in filters.items() if v not in (None, "")})

    def run(self, run_id: str) -> dict:
        return self._get(f"/runs/{run_id}")

    def generate(self, **body) -> Iterator[dict]:
        return self._stream("/generate", body)

    def compare(self, **body) -> Iterator[dict]:
        return self._stream("/compare", body)

    def sweep(self, **body) -> Iterator[dict]:
        return self._stream("/sweeps", body)

    def acceptance(self, **filters) -> dict:
        """{"pooled": groups over all categories, "by_category": groups per category} (analysis.acceptance_groups),
        and "reference": the labels of the reference sweeps among the runs counted. `kind` and `status`
        take lists."""
        return self._get("/aggregates/acceptance", params={k: v for k, v in filters.items() if v})

    def codesign(self, target: str | None = None, drafter: str | None = None) -> dict:
        return self._get("/codesign", params={k: v for k, v in (("target", target), ("drafter", drafter)) if v})

    def start_sweep(self, **body) -> dict:
        """Start a sweep that runs on without this client (the Sweep page); returns {"job_id"}."""
        return self._post("/sweeps/jobs", body)

    def sweep_job(self, job_id: str) -> dict:
        """A started sweep's state: status, done, total, label, elapsed_s, eta_s, sweep_id, error."""
        return self._get(f"/sweeps/jobs/{job_id}")

    def cancel_sweep(self, job_id: str) -> dict:
        return self._post(f"/sweeps/jobs/{job_id}/cancel", {})

    def sweeps(self) -> list[dict]:
        return self._get("/sweeps")

    def sweep_points(self, sweep_id: str | None = None, target: str | None = None) -> list[dict]:
        return self._get("/sweeps/points", params={k: v for k, v in (("sweep_id", sweep_id), ("target", target)) if v})

    def _get(self, path: str, params: dict | None = None):
        try:
            response = self._http.get(path, params=params)
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        return self._json(response)

    def _post(self, path: str, body: dict):
        try:
            response = self._http.post(path, json=body)
        except httpx.TransportError as error:
            raise self._unreachable(error) from error
        return self._json(response)

    def _stream(self, path: str, body: dict) -> Iterator[dict]:
        try:
            with self._http.stream("POST", path, json=body, timeout=httpx.Timeout(10.0, read=None)) as response:
                if response.status_code >= 400:
                    response.read()
                    self._json(response)
                for line in response.iter_lines():
                    if line:
                        record = json.loads(line)
                        if record.get("type") == "error":
                            raise WorkerError(record["message"])
                        yield record
        except httpx.TransportError as error:
            raise self._unreachable(error) from error

    def _json(self, response: httpx.Response):
        if response.status_code >= 400:
            try:
                message = response.json().get("error") or response.text
            except ValueError:
                message = response.text
            raise WorkerError(f"the worker refused the request ({response.status_code}): {message}")
        return response.json()

    def _unreachable(self, error: Exception) -> WorkerError:
        return WorkerError(
            f"cannot reach the SpecScope worker at {self.url} ({type(error).__name__}): start it "
            "with `make run` or `python -m backend worker`, or set SPECSCOPE_WORKER_URL to where it runs"
        )

    def close(self) -> None:
        self._http.close()


class WorkerSweepSink:
    """A sweep measured outside the worker (lab/engine_sweep.py), stored through it: its SweepSink."""

    def __init__(self, client: WorkerClient) -> None:
        self.client = client

    def start_sweep(
        self, sweep_id: str, target: str, fingerprint: str | None, device: str, settings: dict, engine: dict | None
    ) -> None:
        body = {"sweep_id": sweep_id, "target": target, "fingerprint": fingerprint, "device": device}
        self.client._post("/engine-sweeps", body | {"settings": settings, "engine": engine or {}})

    def sweep(self, sweep_id: str) -> dict:
        return self.client._get(f"/engine-sweeps/{sweep_id}")

    def resume_sweep(self, sweep_id: str) -> None:
        self.client._post(f"/engine-sweeps/{sweep_id}/resume", {})

    def measured_configs(self, sweep_id: str) -> set[tuple[str, str, int]]:
        return {tuple(config) for config in self.client._get(f"/engine-sweeps/{sweep_id}/measured")}

    def add_sweep_points(self, sweep_id: str, points: list[dict]) -> None:
        self.client._post(f"/engine-sweeps/{sweep_id}/points", {"points": points})

    def finish_sweep(self, sweep_id: str, status: str) -> None:
        self.client._post(f"/engine-sweeps/{sweep_id}/finish", {"status": status})
