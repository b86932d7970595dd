"""One measured point against a running serving engine: a prompt set sent at a fixed concurrency (the
point's batch size), every request streamed, and the figures SpecScope's own sweeps store, under the
store's column names (TTFT as its median `ttft_s` and 90th percentile, TPOT likewise).

    TTFT        = first streamed text - request sent
    TPOT        = (last text - first text) / (completion tokens - 1)      per request
    throughput  = completion tokens of all requests / wall time of the point    (tokens/s across the batch)
    interactivity = 1 / mean TPOT                                             (tokens/s per user)
    AL          = 1 + accepted / drafting steps    from the server's counters read around the point, or
                  tokens per target pass           from each reply's own counts (SGLang, llama.cpp)

The server should be otherwise idle while a point is measured: its counters count every request. Knows
nothing about the store; the caller records the point.
"""

from __future__ import annotations

import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from backend.engines.adapters import EngineAdapter, bearer
from backend.engines.counts import ReplyAcceptance


@dataclass(frozen=True)
class RequestTiming:
    sent: float
    first: float | None  # first streamed text
    last: float | None  # last streamed text
    tokens: int
    acceptance: ReplyAcceptance | None

    @property
    def tpot_s(self) -> float | None:
        if self.first is None or self.last is None or self.tokens < 2:
            return None
        return (self.last - self.first) / (self.tokens - 1)


def stream_one(
    http: httpx.Client, adapter: EngineAdapter, prompt: str, max_tokens: int, model: str | None
) -> RequestTiming:
    """Send one streamed request and time its chunks (server-sent events: `data: {...}` until `[DONE]`)."""
    ask = adapter.request(prompt, max_tokens, model)
    sent = time.perf_counter()
    first = last = None
    text, tokens, acceptance = "", None, None
    with http.stream("POST", ask.path, json=ask.body, timeout=httpx.Timeout(30.0, read=600.0)) as reply:
        if reply.status_code >= 400:
            raise RuntimeError(
                f"{adapter.name} refused the request ({reply.status_code}): {reply.read().decode()[:300]}"
            )
        for line in reply.iter_lines():
            payload = line.removeprefix("data:").strip()
            if not payload or payload == "[DONE]" or not line.startswith("data:"):
                continue
            chunk = json.loads(payload)
            now = time.perf_counter()
            grown = adapter.text_so_far(chunk, text)
            if len(grown) > len(text):
                first = first if first is not None else now
                last, text = now, grown
            tokens = adapter.tokens_so_far(chunk) or tokens
            acceptance = adapter.reply_acceptance(chunk) or acceptance
    return RequestTiming(sent, first, last, tokens or 0, acceptance)


def _percentile(values: list[float], share: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure_point(
    url: str,
    adapter: EngineAdapter,
    prompts: list[str],
    concurrency: int,
    max_tokens: int,
    model: str | None = None,
    token: str | None = None,
) -> dict:
    """Every prompt once, `concurrency` at a time; the point's figures (see the module docstring)."""
    headers = bearer(token)
    # an engine that closes a connection after a streamed reply (llama-server) gets a fresh one per request,
    # else the next request sent on it fails; the others keep theirs, so TTFT holds no connect time
    limits = httpx.Limits(max_keepalive_connections=0) if adapter.fresh_connections else httpx.Limits()
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=60.0, limits=limits) as http:
        before = adapter.read_counts(http)
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            timings = list(pool.map(lambda prompt: stream_one(http, adapter, prompt, max_tokens, model), prompts))
        wall = time.perf_counter() - started
        after = adapter.read_counts(http)
    tokens = sum(t.tokens for t in timings)
    ttfts = [t.first - t.sent for t in timings if t.first is not None]
    tpots = [t.tpot_s for t in timings if t.tpot_s is not None]
    point = {
        "batch_size": concurrency,
        "prompts": len(timings),
        "new_tokens": tokens,
        "wall_s": wall,
        "throughput_tps": tokens / wall if wall > 0 else 0.0,
        "interactivity_tps": 1 / statistics.mean(tpots) if tpots and statistics.mean(tpots) > 0 else None,
        "ttft_s": _percentile(ttfts, 0.5),
        "ttft_s_p90": _percentile(ttfts, 0.9),
        "tpot_s_p50": _percentile(tpots, 0.5),
        "tpot_s_p90": _percentile(tpots, 0.9),
    }
    return point | _acceptance(before, after, [t.acceptance for t in timings if t.acceptance])


def _acceptance(before, after, replies: list[ReplyAcceptance]) -> dict:
    """AL, acceptance rate and per-position survival from the counters around the point, else the replies."""
    if before is not None and after is not None:
        stats = after.minus(before).counter().stats()
        if stats.drafting_steps:
            return {
                "al": stats.al,
                "acceptance_rate": stats.acceptance_rate,
                "survival": stats.survival,
                "al_from": "server counters",
            }
    if replies:
        generated, passes = sum(r.generated for r in replies), sum(r.target_passes for r in replies)
        counted = [r for r in replies if r.drafted_tokens]
        rate = sum(r.accepted_tokens for r in counted) / sum(r.drafted_tokens for r in counted) if counted else None
        return {"al": generated / passes, "acceptance_rate": rate, "survival": [], "al_from": "tokens per target pass"}
    return {"al": None, "acceptance_rate": None, "survival": [], "al_from": None}
