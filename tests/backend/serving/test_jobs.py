"""The compute queue: a job whose client has gone stops counting at once, before the compute thread
reaches its next check."""

from __future__ import annotations

import asyncio
import threading

from backend.serving.jobs import Job, Scheduler


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
