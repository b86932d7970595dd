"""Sweeps that run on without their client, for the dashboard's Sweep page: start one, poll its
progress (done, total, ETA), cancel it. The streamed POST /sweeps (the command line's) and these
share the body, the scheduler and the dispatcher; only the way progress travels differs.

    POST /sweeps/jobs                 start; {"job_id"}
    GET  /sweeps/jobs/{job_id}        {status, done, total, label, elapsed_s, eta_s, sweep_id, error}
    POST /sweeps/jobs/{job_id}/cancel stop it between batches (the configurations it finished stay stored)

Knows nothing about models or the store.
"""

from collections import OrderedDict

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from backend.serving.jobs import DetachedJob, Scheduler

KEPT_JOBS = 64  # finished jobs remembered for polling, oldest forgotten first


def router(scheduler: Scheduler, body_model: type[BaseModel]) -> APIRouter:
    """The routes, for `body_model` (the worker's SweepBody)."""
    routes = APIRouter()
    jobs: OrderedDict[str, DetachedJob] = OrderedDict()

    def find(job_id: str) -> DetachedJob:
        if job_id not in jobs:
            raise HTTPException(404, f"no sweep job {job_id}")
        return jobs[job_id]

    async def start(body: body_model) -> dict:  # type: ignore[valid-type]
        job = DetachedJob("sweep", body, drafter=",".join(body.drafters))
        jobs[job.id] = job
        while len(jobs) > KEPT_JOBS:
            oldest = next(iter(jobs))
            if jobs[oldest].finished is None:
                break
            jobs.pop(oldest)
        scheduler.submit(job)
        return {"job_id": job.id}

    routes.add_api_route(
        "/sweeps/jobs",
        start,
        methods=["POST"],
        summary="start a sweep that runs on without its client; poll GET /sweeps/jobs/{job_id}",
    )

    @routes.get("/sweeps/jobs/{job_id}", summary="a started sweep's progress and outcome")
    def state(job_id: str) -> dict:
        job = find(job_id)
        return job.state(scheduler.position(job))

    @routes.post("/sweeps/jobs/{job_id}/cancel", summary="cancel a started sweep")
    def cancel(job_id: str) -> dict:
        job = find(job_id)
        job.cancelled.set()
        return job.state(scheduler.position(job))

    return routes
