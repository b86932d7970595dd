"""One compute job at a time, first come first served, with results streamed back as records.

The worker's HTTP handlers are asynchronous; the engine is not. A `Job` is run on the single compute
thread and pushes records (plain dicts) into an asyncio queue the handler drains. A handler whose
client went away sets `cancelled`; the job notices between engine steps and stops, and a job still
waiting in line is skipped.

Every job's start and end (id, kind, drafter, duration, outcome) is logged, with the traceback of
a job that failed on a bug.

Knows nothing about models or HTTP.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


class JobCancelled(Exception):
    """Raised inside a job when its client has gone."""


@dataclass
class Job:
    kind: str
    request: Any
    loop: asyncio.AbstractEventLoop
    drafter: str | None = None  # for the log: the drafter (or drafters) the job runs
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    records: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancelled: threading.Event = field(default_factory=threading.Event)
    error: str | None = None  # the message of the error record it emitted, if any

    def emit(self, record: dict) -> None:
        """Called from the compute thread."""
        if record.get("type") == "error":
            self.error = record.get("message")
        self.loop.call_soon_threadsafe(self.records.put_nowait, record)

    def check(self) -> None:
        if self.cancelled.is_set():
            raise JobCancelled


_DONE = {"type": "__done__"}


@dataclass
class DetachedJob(Job):
    """A job no client streams: it runs on when the page that started it goes away, keeps its latest
    progress for polling, and ends only when done or when `cancelled` is set (a cancel request)."""

    loop: None = None
    status: str = "queued"  # queued | running | complete | cancelled | failed
    done: int = 0
    total: int = 0
    label: str = ""
    result: dict | None = None  # the final record of its kind (a sweep's report)
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None

    def emit(self, record: dict) -> None:
        """Called from the compute thread."""
        kind = record.get("type")
        if self.started is None:
            self.started, self.status = time.time(), "running"
        if kind == "progress":
            self.done, self.total, self.label = record["done"], record["total"], record["label"]
        elif kind == "loading":
            self.label = f"loading {record['spec']}"
        elif kind == "error":
            self.error = record.get("message")
        elif record is _DONE:
            self.finished = time.time()
            self.status = "cancelled" if self.cancelled.is_set() else "failed" if self.error else "complete"
        else:
            self.result = record

    def state(self, position: int) -> dict:
        """What a poll returns: progress, elapsed time and an ETA from the rate so far."""
        now = self.finished or time.time()
        elapsed = now - self.started if self.started else 0.0
        eta = elapsed * (self.total - self.done) / self.done if self.done and self.status == "running" else None
        return {
            "job_id": self.id,
            "kind": self.kind,
            "status": self.status,
            "position": position,
            "done": self.done,
            "total": self.total,
            "label": self.label,
            "elapsed_s": elapsed,
            "eta_s": eta,
            "error": self.error,
            "sweep_id": (self.result or {}).get("sweep_id"),
        }


class Scheduler:
    def __init__(self, execute: Callable[[Job], None]) -> None:
        self.execute = execute
        self._pending: deque[Job] = deque()
        self._running: Job | None = None
        self._wake = threading.Condition()
        self._thread = threading.Thread(target=self._loop, name="compute", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._wake:
            self._pending.append(job)
            self._wake.notify()

    def position(self, job: Job) -> int:
        """0 while running (or done), else how many jobs are ahead of it."""
        with self._wake:
            if job not in self._pending:
                return 0
            ahead = list(self._pending).index(job)
            return ahead + (self._running is not None)

    @property
    def queue_length(self) -> int:
        """Jobs running or waiting whose client is still there (a cancelled job is on its way out)."""
        with self._wake:
            jobs = [*self._pending, *([self._running] if self._running is not None else [])]
            return sum(not job.cancelled.is_set() for job in jobs)

    async def stream(self, job: Job) -> AsyncIterator[dict]:
        """Submit the job and yield its records; report the place in line while it waits."""
        self.submit(job)
        reported = None
        try:
            while True:
                try:
                    record = await asyncio.wait_for(job.records.get(), timeout=0.25)
                except TimeoutError:
                    place = self.position(job)
                    if place and place != reported:
                        reported = place
                        yield {"type": "queued", "position": place}
                    continue
                if record is _DONE:
                    return
                yield record
        finally:
            job.cancelled.set()  # finished, or the client went away: either way nothing more is wanted

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._pending:
                    self._wake.wait()
                job = self._pending.popleft()
                self._running = job
            started = time.perf_counter()
            outcome = "skipped: its client had gone"
            try:
                if not job.cancelled.is_set():
                    log.info("job %s started: %s, drafter %s", job.id, job.kind, job.drafter)
                    self.execute(job)
                    outcome = (
                        "cancelled" if job.cancelled.is_set() else (f"failed: {job.error}" if job.error else "complete")
                    )
            except JobCancelled:
                outcome = "cancelled"
            except Exception as error:  # a bug: report it to the client rather than kill the thread
                log.exception("job %s failed on an internal error", job.id)
                outcome = f"failed: internal error: {type(error).__name__}"
                job.emit({"type": "error", "message": f"internal error: {type(error).__name__}: {error}"})
            finally:
                with self._wake:
                    self._running = None
                job.emit(_DONE)
            log.log(
                logging.WARNING if outcome.startswith("failed") else logging.INFO,
                "job %s ended: %s, drafter %s, %.2f s, %s",
                job.id,
                job.kind,
                job.drafter,
                time.perf_counter() - started,
                outcome,
            )
