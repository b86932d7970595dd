"""Routes through which a sweep measured outside the worker (against a serving engine, by the command
line) is stored: the worker stays the only writer of the store, and each point lands as soon as it is
measured, so an engine that dies mid-sweep loses nothing already stored.

    POST /engine-sweeps                        start one: {sweep_id, target, device, settings, engine}
    GET  /engine-sweeps/{sweep_id}             its row (a resume checks it first)
    POST /engine-sweeps/{sweep_id}/resume      reopen it (its failed points go)
    GET  /engine-sweeps/{sweep_id}/measured    [[drafter, draft_len, batch_size], ...] already stored
    POST /engine-sweeps/{sweep_id}/points      {points: [...]} append
    POST /engine-sweeps/{sweep_id}/finish      {status: complete | incomplete}

Knows nothing about engines or HTTP clients; lab/engine_sweep.py decides what is measured.
"""

from __future__ import annotations

from typing import Any, Literal

import pyarrow as pa
from fastapi import APIRouter, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from backend.lab.store import RunStore
from backend.serving.rows import json_row


class StartBody(BaseModel):
    sweep_id: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    target: str = Field(min_length=1, max_length=300)
    fingerprint: str | None = None
    device: str = Field(max_length=300)
    settings: dict[str, Any]
    engine: dict[str, Any]


class PointFields(BaseModel):
    """A point's configuration (the store's key columns); its figures come as further fields, the store's
    column names (engines/measure.py)."""

    model_config = ConfigDict(extra="allow")
    drafter: str = Field(min_length=1, max_length=200)
    draft_len: str | int
    batch_size: int = Field(ge=1)
    category: str
    split: str
    status: Literal["measured", "failed"]


class PointsBody(BaseModel):
    points: list[PointFields] = Field(max_length=10_000)


class FinishBody(BaseModel):
    status: Literal["complete", "incomplete"]


def router(store: RunStore) -> APIRouter:
    routes = APIRouter()

    def stored(sweep_id: str) -> str:
        if not store.has_sweep(sweep_id):
            raise HTTPException(404, f"no sweep {sweep_id} in {store.path}")
        return sweep_id

    @routes.post("/engine-sweeps", summary="store a new sweep measured on a serving engine")
    def start(body: StartBody) -> dict:
        if store.has_sweep(body.sweep_id):
            raise HTTPException(409, f"sweep {body.sweep_id} is already stored: resume it instead")
        store.start_sweep(body.sweep_id, body.target, body.fingerprint, body.device, body.settings, body.engine)
        return {"sweep_id": body.sweep_id}

    @routes.get("/engine-sweeps/{sweep_id}", summary="a stored sweep's row")
    def sweep(sweep_id: str) -> dict:
        return json_row(store.sweep(stored(sweep_id)))

    @routes.post("/engine-sweeps/{sweep_id}/resume", summary="reopen a stored sweep to measure what it lacks")
    def resume(sweep_id: str) -> dict:
        store.resume_sweep(stored(sweep_id))
        return {"sweep_id": sweep_id}

    @routes.get("/engine-sweeps/{sweep_id}/measured", summary="the configurations a sweep has stored")
    def measured(sweep_id: str) -> list[list]:
        return [list(config) for config in sorted(store.measured_configs(sweep_id))]

    @routes.post("/engine-sweeps/{sweep_id}/points", summary="append measured (or failed) points")
    def points(sweep_id: str, body: PointsBody) -> dict:
        try:
            store.add_sweep_points(stored(sweep_id), [point.model_dump() for point in body.points])
        except (TypeError, ValueError, pa.ArrowException) as error:  # a figure of the wrong type
            raise HTTPException(422, f"points not stored: {error}") from error
        return {"stored": len(body.points)}

    @routes.post("/engine-sweeps/{sweep_id}/finish", summary="mark a sweep complete or incomplete")
    def finish(sweep_id: str, body: FinishBody) -> dict:
        store.finish_sweep(stored(sweep_id), body.status)
        return {"sweep_id": sweep_id, "status": body.status}

    return routes
