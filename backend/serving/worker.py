"""The HTTP worker: one process that owns the models and the device, serves live speculative
decoding as NDJSON streams, and is the only writer of the DuckDB run store.

    python -m backend worker [--host 127.0.0.1] [--port 8765] [--db FILE] [--preload default]

Endpoints (OpenAPI at /docs): GET /health, GET /models, POST /generate, POST /compare, GET /runs,
GET /runs/{run_id}, POST /sweeps (a sweep as one job, streamed), POST /sweeps/jobs (one that runs
on without its client: sweep_jobs.py), POST /engine-sweeps... (a sweep measured on a serving engine,
stored point by point: engine_sweeps.py), GET /sweeps, GET /sweeps/points, the read-only analyses
GET /aggregates/acceptance and GET /codesign, and GET /metrics (Prometheus counters under vLLM's
spec-decode names: prometheus.py). One compute job runs at a time; others wait in line
and are told their place. At start it imports the reference sweep (lab/reference.py) and publishes
its URL beside the store (discovery.py) for command lines to find.
A client that disconnects cancels its job. If SPECSCOPE_TOKEN is set every request needs
`Authorization: Bearer <token>`; binding to a non-loopback address without a token is refused.
No endpoint takes SQL. This module is routes and validation; the work is in dispatch.py and live.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import json
import logging
import os
import secrets
import threading
import time
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from backend.core.errors import SpecScopeError
from backend.core.models import DEFAULT_SPEC, config_facts, model_label
from backend.core.verify import SamplingParams
from backend.drafters import DRAFTER_NAMES, REGISTRY, available_drafters
from backend.drafters.shipped import drafter_card
from backend.lab.analysis import acceptance_groups
from backend.lab.codesign import codesign_report
from backend.lab.reference import REFERENCE_DIR, import_reference, reference_labels
from backend.lab.store import RunStore
from backend.lab.store_schema import DEFAULT_STATUSES, RUN_KINDS, RUN_STATUSES
from backend.serving import discovery, engine_sweeps, logs, prometheus, sweep_jobs
from backend.serving.bodies import (
    KINDS_HELP,
    MAX_RUNS_LISTED,
    STATUSES_HELP,
    CompareBody,
    DrafterFields,
    GenerateBody,
    PromptFields,
    SweepBody,
)
from backend.serving.dispatch import JobDispatcher
from backend.serving.jobs import Job, Scheduler
from backend.serving.model_cache import ModelCache
from backend.serving.rows import json_row
from backend.serving.run_request import LaneSpec, RunRequest
from backend.serving.validation import ModelName, Moment, name_problem

log = logging.getLogger(__name__)


class WorkerSettings(BaseModel):
    db_path: str | None = None
    default_target: str = DEFAULT_SPEC
    preload: list[str] = [DEFAULT_SPEC]
    extra_targets: list[str] = []
    device: str = "auto"
    dtype: str = "auto"
    allow_remote_code: bool = False
    model_budget_gb: float = 4.0
    token: str | None = None
    compile: str = "auto"  # the targets' passes: auto | on | off (target_passes.py)
    reference: str | None = str(REFERENCE_DIR)  # reference Parquet folder imported at start; None: none
    log_file: str | None = None  # default: worker.log beside the store


def check_known(name: str, given: list[str] | None, allowed: tuple[str, ...]) -> None:
    """A 422 unless every value given for a filter of the acceptance figures is one they count."""
    if given and set(given) - set(allowed):
        raise HTTPException(422, f"{name}: choose from {', '.join(allowed)}")


def create_app(settings: WorkerSettings) -> FastAPI:
    store = RunStore(settings.db_path)
    log_file = logs.configure(Path(settings.log_file) if settings.log_file else logs.default_log_file(store.path))
    log.info("worker starting: store %s, log %s", store.path, log_file)
    imported = import_reference(store, Path(settings.reference) if settings.reference else None)
    if imported:
        log.info("imported %d reference sweep(s) from %s", imported, settings.reference)
    models = ModelCache(
        int(settings.model_budget_gb * 2**30),
        settings.device,
        settings.dtype,
        settings.allow_remote_code,
        compile=settings.compile,
    )
    scheduler = Scheduler(JobDispatcher(models, store, settings.default_target).execute)
    state = {"preload_error": None, "warm": set()}

    def preload() -> None:
        for spec in settings.preload:
            try:
                models.get(spec)  # loads, and compiles or warms the target's passes
                state["warm"].add(spec)
            except SpecScopeError as error:
                log.warning("preloading %s failed: %s", spec, error)
                state["preload_error"] = str(error)
            except Exception as error:  # noqa: BLE001 - the dashboard must hear why, not wait forever
                log.exception("preloading %s failed", spec)
                state["preload_error"] = f"loading {spec} failed: {type(error).__name__}: {error}"

    threading.Thread(target=preload, name="preload", daemon=True).start()

    def authorised(request: Request) -> None:
        if settings.token is None:
            return
        header = request.headers.get("authorization", "")
        if not secrets.compare_digest(header, f"Bearer {settings.token}"):
            raise HTTPException(401, "a bearer token is required (Authorization: Bearer $SPECSCOPE_TOKEN)")

    app = FastAPI(
        title="SpecScope worker",
        dependencies=[Depends(authorised)],
        description="Live speculative decoding, streamed as NDJSON records; runs stored in DuckDB.",
    )

    @app.middleware("http")
    async def log_requests(request: Request, call_next):
        started = time.perf_counter()
        try:
            response = await call_next(request)
        except Exception:
            log.exception("%s %s failed", request.method, request.url.path)
            raise
        log.info(
            "%s %s %d %.1f ms",
            request.method,
            request.url.path,
            response.status_code,
            1000 * (time.perf_counter() - started),
        )
        return response

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        problems = []
        for item in error.errors():
            where = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
            message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
            if item.get("type") == "json_invalid":  # pydantic names a character offset as the place
                where, message = "", "the body is not valid JSON"
            elif item.get("type") == "missing" and tuple(item.get("loc", ())) == ("body",):
                message = "the request needs a JSON body"
            problems.append(f"{where}: {message}" if where else message)
        return JSONResponse({"error": "; ".join(problems)}, status_code=422)

    @app.exception_handler(StarletteHTTPException)  # FastAPI's own and the router's (404, 405) alike
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": error.detail}, status_code=error.status_code)

    @app.get("/health")
    def health() -> dict:
        loaded = models.loaded()
        ready = set(settings.preload) <= state["warm"] or state["preload_error"] is not None
        return {
            "status": "ready" if ready else "loading",
            "loading": models.loading,
            "loading_label": model_label(models.loading or settings.default_target),
            "warming": models.warming,
            "loaded": loaded,
            "error": state["preload_error"],
            "default_target": settings.default_target,
            "device": settings.device,
            "queue_length": scheduler.queue_length,
            "recovered_incomplete_runs": store.recovered,
        }

    @app.get("/models")
    def list_models() -> dict:
        targets = []
        held = [spec for spec in models.loaded() if spec not in models.other_precisions]
        for spec in dict.fromkeys([settings.default_target, *settings.extra_targets, *held]):
            loaded = models.peek(spec)
            targets.append(
                {
                    "spec": spec,
                    "loaded": loaded is not None,
                    "precision": loaded.precision if loaded else None,  # dtype and the CPU's matrix features
                    "facts": loaded.facts.to_dict() if loaded else None,
                    "tle_per_forward": loaded.tle_per_forward if loaded else None,
                }
            )
        defaults = DrafterFields().model_dump()
        available = available_drafters(models.peek(settings.default_target))
        return {
            "default_target": settings.default_target,
            "targets": targets,
            "drafters": [
                {
                    "name": name,
                    "defaults": defaults,
                    "available": name in available,
                    "weights": available.get(name),
                    "card": drafter_card(available.get(name)),  # training summary and model card of those weights
                    "summary": REGISTRY[name].summary if name in REGISTRY else "plain decoding (no drafter)",
                    "trained": name in REGISTRY and REGISTRY[name].trained,
                    "trees": name in REGISTRY and REGISTRY[name].trees,  # proposes token trees under a budget
                    "options": [info.to_dict() for info in REGISTRY[name].option_infos()] if name in REGISTRY else [],
                }
                for name in DRAFTER_NAMES
            ],
        }

    def run_request(body: PromptFields, lanes: list[LaneSpec], replay: bool) -> RunRequest:
        for lane in lanes:
            for field_name in ("draft_model", "drafter_path"):
                name = getattr(lane.options, field_name)
                problem = name_problem(name) if name is not None else None
                if problem:
                    raise HTTPException(422, f"{field_name}: {problem}")
        try:
            sampling = SamplingParams(body.temperature, body.top_p, body.top_k)
        except SpecScopeError as error:
            raise HTTPException(422, str(error)) from error
        return RunRequest(
            turns=body.turns(),
            target=body.target or settings.default_target,
            lanes=lanes,
            max_new_tokens=body.max_new_tokens,
            sampling=sampling,
            seed=body.seed,
            stop=body.stop,
            baseline=body.baseline,
            replay=replay,
            question_id=body.question_id,
            category=body.category,
        )

    def stream(kind: str, request: RunRequest | SweepBody, drafters: list[str]) -> StreamingResponse:
        job = Job(kind, request, asyncio.get_running_loop(), drafter=",".join(drafters))

        async def lines():
            async for record in scheduler.stream(job):
                yield json.dumps(record, default=_json_default) + "\n"

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/generate", summary="decode one prompt with one drafter, streaming a record per step")
    async def generate(body: GenerateBody) -> StreamingResponse:
        return stream("generate", run_request(body, [body.lane()], replay=False), [body.drafter])

    @app.post("/compare", summary="decode one prompt with 2-4 drafters side by side, lanes streaming together")
    async def compare(body: CompareBody) -> StreamingResponse:
        return stream(
            "compare",
            run_request(body, [lane.lane() for lane in body.lanes], replay=body.replay),
            [lane.drafter for lane in body.lanes],
        )

    @app.post("/sweeps", summary="run a drafter x D x batch-size sweep; streams progress, then the report")
    async def sweep(body: SweepBody) -> StreamingResponse:
        return stream("sweep", body, body.drafters)

    @app.get("/sweeps", summary="stored sweeps, newest first")
    def sweeps() -> list[dict]:
        return [json_row(row) for row in store.sweeps().to_dict(orient="records")]

    @app.get("/sweeps/points", summary="sweep points: of one sweep, or of every sweep of a target")
    def sweep_points(sweep_id: str | None = None, target: str | None = None) -> list[dict]:
        frame = store.sweep_points(sweep_id, target)
        return [json_row(row) for row in frame.to_dict(orient="records")]

    @app.get(
        "/aggregates/acceptance",
        summary="AL (with CI), histogram and per-position acceptance by "
        "drafter and D, pooled and per category, over every stored step",
    )
    def acceptance(
        target: str | None = None,
        drafter: str | None = None,
        category: str | None = None,
        split: str | None = None,
        kind: Annotated[list[str] | None, Query(description=KINDS_HELP)] = None,
        status: Annotated[list[str] | None, Query(description=STATUSES_HELP)] = None,
    ) -> dict:
        check_known("kind", kind, RUN_KINDS)
        check_known("status", status, RUN_STATUSES)
        tables = store.acceptance_tables(target, drafter, category, split, kind, status or DEFAULT_STATUSES)
        records = [tables[name].to_dict(orient="records") for name in ("runs", "histogram", "positions")]
        return {
            "pooled": acceptance_groups(*records, pool_categories=True),
            "by_category": acceptance_groups(*records),
            "reference": reference_labels(store, target),
        }

    config_facts_cached = functools.lru_cache(maxsize=32)(config_facts)  # "default" hashes its GGUF file

    @app.get("/codesign", summary="the draft-length rules for a target next to its measured sweeps")
    def codesign(target: ModelName | None = None, drafter: str | None = None) -> dict:
        spec = target or settings.default_target
        try:
            facts = config_facts_cached(spec, settings.allow_remote_code)
        except SpecScopeError as error:
            raise HTTPException(422, str(error)) from error
        # the user's own sweeps; the reference where there are none (the report says so)
        points = store.sweep_points(target=spec, reference=False)
        labels = [] if not points.empty else reference_labels(store, spec)
        if labels:
            points = store.sweep_points(target=spec, reference=True)
        cleaned = [json_row(p) for p in points.to_dict(orient="records")]
        return json_row({**codesign_report(facts, cleaned, drafter), "reference": labels[0] if labels else None})

    @app.get("/runs", summary="stored runs, newest first, with optional filters")
    def runs(
        target: str | None = None,
        drafter: str | None = None,
        draft_len: str | None = None,
        category: str | None = None,
        status: str | None = None,
        kind: str | None = None,
        since: Moment | None = None,
        until: Moment | None = None,
        limit: int = Query(1000, ge=1, le=MAX_RUNS_LISTED),
    ) -> list[dict]:
        frame = store.runs(target, drafter, draft_len, category, status, kind, since, until, limit)
        return [json_row(row) for row in frame.to_dict(orient="records")]

    @app.get("/runs/{run_id}", summary="one stored run with its steps")
    def run(run_id: str) -> dict:
        found = store.run(run_id)
        if found is None:
            raise HTTPException(404, f"no run with id {run_id}")
        steps = [json_row(row) for row in store.steps(run_id).to_dict(orient="records")]
        for step in steps:  # the same shape as streamed step records
            step["index"] = step.pop("step_index")
        return {**json_row(found), "steps": steps}

    app.include_router(sweep_jobs.router(scheduler, SweepBody))
    app.include_router(engine_sweeps.router(store))
    app.include_router(prometheus.router())
    app.state.store = store
    app.state.models = models
    return app


def _json_default(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(host: str, port: int, settings: WorkerSettings) -> None:
    import uvicorn

    settings.token = settings.token or os.environ.get("SPECSCOPE_TOKEN") or None
    if not is_loopback(host) and settings.token is None:
        raise SpecScopeError(
            f"refusing to listen on {host} without a token: set SPECSCOPE_TOKEN "
            "(clients then send it as a bearer token), or bind to 127.0.0.1"
        )
    app = create_app(settings)
    store_path = app.state.store.path
    url = f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"

    @contextlib.asynccontextmanager
    async def published(_app):  # the URL file lives as long as the server (a SIGTERM shuts it down first)
        discovery.publish(store_path, url)
        try:
            yield
        finally:
            discovery.withdraw(store_path)

    app.router.lifespan_context = published
    uvicorn.run(app, host=host, port=port, log_level="warning")
