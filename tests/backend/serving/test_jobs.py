"""The compute queue: a job whose client has gone stops counting at once, before the compute thread
reaches its next check; a detached job's poll gives an ETA from its rate so far once a step is done."""

from __future__ import annotations

import asyncio
import threading

import pytest

from backend.serving.jobs import _DONE, DetachedJob, Job, Scheduler


def test_a_cancelled_job_leaves_the_queue_count_at_once():
    started, release = threading.Event(), threading.Event()

    def execute(job: Job) -> None:
        started.set()
        release.wait(timeout=30)

    scheduler = Scheduler(execute)
    loop = asyncio.new_event_loop()
    running, waiting = Job("generate", None, loop), Job("generate", None, loop)
    scheduler.submit(running)
    assert started.wait(timeout=30)
    scheduler.submit(waiting)
    try:
        assert scheduler.queue_length == 2
        running.cancelled.set()  # its client went away; the compute thread is still inside its step
        assert scheduler.queue_length == 1
        waiting.cancelled.set()
        assert scheduler.queue_length == 0
    finally:
        release.set()


def test_a_detached_job_estimates_the_rest_from_its_rate_so_far(monkeypatch):
    job = DetachedJob("sweep", None, asyncio.new_event_loop())
    clock = [1000.0]
    monkeypatch.setattr("backend.serving.jobs.time.time", lambda: clock[0])
    assert job.state(1)["status"] == "queued" and job.state(1)["eta_s"] is None
    job.emit({"type": "progress", "done": 0, "total": 6, "label": "references"})
    clock[0] += 4.0
    assert job.state(0)["eta_s"] is None  # no step done: no rate yet
    job.emit({"type": "progress", "done": 2, "total": 6, "label": "ngram D=2"})
    clock[0] += 6.0  # 2 of 6 steps in 10 s: 20 s to go
    state = job.state(0)
    assert state["elapsed_s"] == pytest.approx(10.0) and state["eta_s"] == pytest.approx(20.0)
    job.emit(_DONE)
    assert job.state(0)["status"] == "complete" and job.state(0)["eta_s"] is None
