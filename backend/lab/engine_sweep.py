"""A sweep against a serving engine (vLLM, SGLang, TensorRT-LLM, llama.cpp): one point per (D, concurrency),
stored as a sweep beside SpecScope's own, so Pareto, Acceptance and Co-design show both.

D is a server-start option in these engines: with a launch template, one server per D is started, measured
at every concurrency and stopped (engines/launch.py); with a URL, the running server is measured as it is.
A point is stored as soon as it is measured, so nothing is lost when the engine dies: the point that failed
is stored `failed` with its error, the rest of that server's points are skipped (failed too), the sweep
ends `incomplete`, and resuming it (its id) measures again only what is not stored yet.

Point labels: drafter = "<engine>/<method>" ("llamacpp/ngram-simple"; "<engine>/none" for D = 0),
draft_len = D ("server" for a running server whose D was not given), batch_size = the concurrency,
category = split = "all". The acceptance figures are the engine's own (measure.py): no losslessness check,
no per-prompt CI.

A running server that cannot be reached, or refuses the token, is one clear error before anything is
stored. Knows nothing about HTTP routes or the command line; it writes through any `SweepSink` (the store, or the
worker's client when a worker holds the store).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

import httpx

from backend.core.errors import SpecScopeError
from backend.engines.adapters import adapter_for, bearer, engine_version, served_model
from backend.engines.launch import check_template, launched_server
from backend.engines.measure import measure_point
from backend.lab.reference import this_machine

Progress = Callable[[str, int, int], None]  # (label, points done, points in all)


class SweepSink(Protocol):
    """Where a sweep's records go: RunStore has these methods; so does the worker's client."""

    def start_sweep(
        self, sweep_id: str, target: str, fingerprint: str | None, device: str, settings: dict, engine: dict | None
    ) -> None: ...

    def sweep(self, sweep_id: str) -> dict: ...

    def resume_sweep(self, sweep_id: str) -> None: ...

    def measured_configs(self, sweep_id: str) -> set[tuple[str, str, int]]: ...

    def add_sweep_points(self, sweep_id: str, points: list[dict]) -> None: ...

    def finish_sweep(self, sweep_id: str, status: str) -> None: ...


@dataclass(frozen=True)
class EngineSweep:
    engine: str  # a key of engines.adapters.ADAPTERS
    prompts: list[str]
    concurrency: list[int]
    max_new_tokens: int
    url: str | None = None  # a running server ...
    launch: str | None = None  # ... or a command template with {draft_len} and {port}
    draft_lens: list[int] = field(default_factory=list)  # with launch: one server each; with url: at most one
    method: str = "spec"  # the engine's speculative method, for the points' label
    target: str | None = None  # the served model's label; default: what the server lists at /v1/models
    hardware: str | None = None  # where it runs; default: this machine for a launched server, else the URL's host
    model: str | None = None  # the model name the OpenAI-compatible engines expect in requests
    token: str | None = None
    launch_timeout_s: float = 1800.0
    settings: dict = field(default_factory=dict)  # recorded with the sweep (suite, per-category, ...)

    def __post_init__(self) -> None:
        if (self.url is None) == (self.launch is None):
            raise ValueError("give either a server URL or a launch command template")
        if self.launch is not None and not self.draft_lens:
            raise ValueError("a launch template needs the D values to start a server for")
        if self.launch is not None:
            check_template(self.launch)
        if self.url is not None and len(self.draft_lens) > 1:
            raise ValueError("a running server has one D: give at most one draft length with a URL")
        if not self.prompts or not self.concurrency:
            raise ValueError("an engine sweep needs prompts and at least one concurrency level")

    def drafter(self, draft_len: int | None) -> str:
        return f"{self.engine}/{'none' if draft_len == 0 else self.method}"

    def servers(self) -> list[int | None]:
        return list(self.draft_lens) if self.launch else [self.draft_lens[0] if self.draft_lens else None]

    @contextlib.contextmanager
    def server(self, draft_len: int | None) -> Iterator[str]:
        if self.launch is None:
            yield self.url
        else:
            with launched_server(self.launch, draft_len, self.launch_timeout_s) as url:
                yield url


def run_engine_sweep(
    sweep: EngineSweep, sink: SweepSink, progress: Progress | None = None, resume: str | None = None
) -> dict:
    """Measure every (D, concurrency) not stored yet; returns {sweep_id, status, points} (this run's points).
    The sweep is stored once a server has come up (with what it says about itself); when none does, nothing
    is stored and the error says why. A resumed sweep must be the same grid on the same engine."""
    adapter_for(sweep.engine)  # an unknown engine fails before anything is stored
    if sweep.url is not None:
        _check_reachable(sweep)
    sweep_id = resume or uuid.uuid4().hex[:12]
    done = set()
    if resume:
        _check_same_grid(sweep, sink.sweep(resume))  # before anything stored changes
        sink.resume_sweep(resume)
        done = sink.measured_configs(resume)
    todo = [
        (draft_len, level)
        for draft_len in sweep.servers()
        for level in sweep.concurrency
        if (sweep.drafter(draft_len), _label(draft_len), level) not in done
    ]
    started, points, unstored = bool(resume), [], []  # unstored: failures from before the sweep was stored
    try:
        for draft_len in dict.fromkeys(d for d, _ in todo):
            levels = [level for d, level in todo if d == draft_len]
            try:
                with sweep.server(draft_len) as url:
                    if not started:
                        _start(sweep, sink, sweep_id, url)
                        started = True
                        if unstored:
                            sink.add_sweep_points(sweep_id, unstored)
                    for index, level in enumerate(levels):
                        if progress:
                            progress(f"D={_label(draft_len)}, concurrency {level}", len(points), len(todo))
                        try:
                            point = _measured(sweep, url, draft_len, level)
                        except (httpx.HTTPError, RuntimeError, ValueError) as error:
                            failed = [_failed(sweep, draft_len, rest, _reason(error)) for rest in levels[index:]]
                            sink.add_sweep_points(sweep_id, failed)
                            points += failed
                            break
                        sink.add_sweep_points(sweep_id, [point])
                        points.append(point)
            except (httpx.HTTPError, RuntimeError) as error:  # the server did not start, or failed on the way out
                stored = {p["batch_size"] for p in points if p["draft_len"] == _label(draft_len)}
                failed = [_failed(sweep, draft_len, lvl, _reason(error)) for lvl in levels if lvl not in stored]
                if started:
                    sink.add_sweep_points(sweep_id, failed)
                else:
                    unstored.extend(failed)
                points += failed
    except KeyboardInterrupt:  # what was measured stays; the sweep can be resumed
        if started:
            sink.finish_sweep(sweep_id, "incomplete")
        raise
    if not started and unstored:
        raise SpecScopeError(f"no {sweep.engine} server came up, so nothing was stored: {unstored[0]['error']}")
    if not started:  # nothing was left to measure
        _start(sweep, sink, sweep_id, None)
    status = "incomplete" if any(p["status"] == "failed" for p in points) else "complete"
    sink.finish_sweep(sweep_id, status)
    if progress:
        progress("done", len(points), len(todo))
    return {"sweep_id": sweep_id, "status": status, "points": points}


def _check_same_grid(sweep: EngineSweep, stored: dict) -> None:
    """A resumed sweep measures the same engine, method, D values and concurrencies as the stored one (its
    failed points are measured again, never dropped)."""
    settings = json.loads(stored.get("settings") or "{}")
    config = json.loads(stored.get("engine_config") or "{}")
    same = (
        stored.get("engine") == sweep.engine
        and config.get("method") == sweep.method
        and settings.get("draft_lens") == list(sweep.draft_lens)
        and settings.get("concurrency") == list(sweep.concurrency)
    )
    if not same:
        raise SpecScopeError(
            f"sweep {stored['sweep_id']} was measured on {stored.get('engine') or 'SpecScope'} with method "
            f"{config.get('method')}, D {settings.get('draft_lens')} and concurrency {settings.get('concurrency')}: "
            "resume it with the same --engine, --method, --draft-lens and --concurrency"
        )


def _check_reachable(sweep: EngineSweep) -> None:
    """A wrong URL or token is one sentence before anything is stored (GET /v1/models needs the token where
    the server has one; /health often does not)."""
    headers = bearer(sweep.token)
    try:
        reply = httpx.get(f"{sweep.url.rstrip('/')}/v1/models", headers=headers, timeout=10)
    except (httpx.HTTPError, httpx.InvalidURL) as error:
        raise SpecScopeError(f"cannot reach the {sweep.engine} server at {sweep.url}: {error}") from error
    if reply.status_code in (401, 403):
        given = "the token given" if sweep.token else "requests without a token"
        raise SpecScopeError(f"the {sweep.engine} server at {sweep.url} refused {given} ({reply.status_code})")


def _label(draft_len: int | None) -> str:
    return "server" if draft_len is None else str(draft_len)


def _reason(error: Exception) -> str:
    text = str(error).strip() or type(error).__name__
    return text if not isinstance(error, httpx.TransportError) else f"the server stopped answering: {text}"


def _start(sweep: EngineSweep, sink: SweepSink, sweep_id: str, url: str | None) -> None:
    """Store the sweep's row with what the first server that came up says about itself."""
    version = model = None
    if url is not None:
        headers = bearer(sweep.token)
        with httpx.Client(base_url=url.rstrip("/"), headers=headers) as http:
            version, model = engine_version(http, adapter_for(sweep.engine)), served_model(http)
    hardware = sweep.hardware or (this_machine() if sweep.launch else f"the server at {urlsplit(sweep.url).netloc}")
    where = {"launch": sweep.launch} if sweep.launch else {"url": sweep.url}
    config = where | {"method": sweep.method, "served_model": model, "request_model": sweep.model}
    settings = sweep.settings | {
        "concurrency": sweep.concurrency,
        "draft_lens": sweep.draft_lens,
        "max_new_tokens": sweep.max_new_tokens,
        "prompts": len(sweep.prompts),
    }
    engine = {"engine": sweep.engine, "engine_version": version, "engine_config": config}
    target = sweep.target or model or sweep.engine
    sink.start_sweep(sweep_id, target, None, hardware, settings, engine)


def _base(sweep: EngineSweep, draft_len: int | None, level: int) -> dict:
    return {
        "drafter": sweep.drafter(draft_len),
        "draft_len": _label(draft_len),
        "batch_size": level,
        "category": "all",
        "split": "all",
    }


def _measured(sweep: EngineSweep, url: str, draft_len: int | None, level: int) -> dict:
    figures = measure_point(
        url, adapter_for(sweep.engine), sweep.prompts, level, sweep.max_new_tokens, sweep.model, sweep.token
    )
    return _base(sweep, draft_len, level) | figures | {"status": "measured"}


def _failed(sweep: EngineSweep, draft_len: int | None, level: int, error: str) -> dict:
    return _base(sweep, draft_len, level) | {"status": "failed", "error": error}
