"""One adapter per serving engine: how to ask it for one streamed completion, how to read the text, the
token count and the speculative-decoding figures out of its stream, and how to read its server-wide
counters. `measure.py` drives any of them the same way.

    vllm          POST /v1/chat/completions (OpenAI, stream, usage in the last chunk); counters: GET /metrics
                  (Prometheus)
    tensorrt_llm  POST /v1/chat/completions (trtllm-serve, OpenAI); counters: GET /metrics (iteration
                  statistics, JSON)
    sglang        POST /generate (native, stream; cumulative text and meta_info in every chunk); per reply
    llamacpp      POST /v1/chat/completions (llama-server, OpenAI; `timings` in the last chunk,
                  tools/server/server-task.cpp); per reply

Each prompt is sent as one user turn of a chat, so the server applies the model's chat template as
SpecScope's own engine does; SGLang's native /generate (the route that reports verify counts) takes the
prompt as raw text.

and where each says its version (stored with every engine sweep):

    vllm          GET /version          {"version"}      vllm/entrypoints/openai/api_server.py
    tensorrt_llm  GET /version          {"version"}      tensorrt_llm/serve/openai_server.py
    sglang        GET /version, else /server_info or (older) /get_server_info   {"version"}
                                                     python/sglang/srt/entrypoints/http_server.py
    llamacpp      GET /props            {"build_info"}   tools/server/server-context.cpp (get_res_props)

All four list the served model at GET /v1/models (OpenAI's `data[0].id`).

Greedy (temperature 0) throughout, as the local engine's acceptance figures are. Knows nothing about the
store or the worker; the parsing of each engine's figures is in its own module beside this one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import httpx

from backend.engines.counts import EngineCounts, ReplyAcceptance
from backend.engines.llamacpp import llamacpp_acceptance
from backend.engines.sglang import sglang_acceptance
from backend.engines.tensorrt_llm import tensorrt_llm_counts
from backend.engines.vllm import spec_decode_counts


@dataclass(frozen=True)
class StreamRequest:
    path: str
    body: dict


class EngineAdapter(Protocol):
    name: str
    version_routes: tuple[tuple[str, str], ...]  # (GET path, key of the JSON reply) tried in turn for the version
    fresh_connections: bool  # a new connection per request (the server closes one after a streamed reply)

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest: ...

    def text_so_far(self, chunk: dict, previous: str) -> str: ...

    def tokens_so_far(self, chunk: dict) -> int | None: ...

    def reply_acceptance(self, chunk: dict) -> ReplyAcceptance | None: ...

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        """The server's running totals now; None for an engine that reports per reply only."""
        ...


class OpenAIChat:
    """The OpenAI-compatible streamed chat completion vLLM, trtllm-serve and llama-server share."""

    fresh_connections = False

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest:
        body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens, "temperature": 0}
        body |= {"stream": True, "stream_options": {"include_usage": True}}
        return StreamRequest("/v1/chat/completions", body | ({"model": model} if model else {}))

    def text_so_far(self, chunk: dict, previous: str) -> str:
        return previous + "".join((c.get("delta") or {}).get("content") or "" for c in chunk.get("choices") or [])

    def tokens_so_far(self, chunk: dict) -> int | None:
        return (chunk.get("usage") or {}).get("completion_tokens")

    def reply_acceptance(self, chunk: dict) -> ReplyAcceptance | None:
        return None


class VllmAdapter(OpenAIChat):
    name = "vllm"
    version_routes = (("/version", "version"),)

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        reply = http.get("/metrics")
        reply.raise_for_status()
        return spec_decode_counts(reply.text)


class TensorRTLLMAdapter(OpenAIChat):
    """trtllm-serve hands each iteration's statistics out once, so the adapter keeps the running totals."""

    name = "tensorrt_llm"
    version_routes = (("/version", "version"),)

    def __init__(self) -> None:
        self.total = EngineCounts(0, 0, 0)

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        reply = http.get("/metrics")
        reply.raise_for_status()
        new = tensorrt_llm_counts(reply.json() or [])
        self.total = EngineCounts(
            self.total.drafts + new.drafts,
            self.total.drafted_tokens + new.drafted_tokens,
            self.total.accepted_tokens + new.accepted_tokens,
        )
        return self.total


class SGLangAdapter:
    name = "sglang"
    version_routes = (("/version", "version"), ("/server_info", "version"), ("/get_server_info", "version"))
    fresh_connections = False

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest:
        sampling = {"max_new_tokens": max_tokens, "temperature": 0}
        return StreamRequest("/generate", {"text": prompt, "sampling_params": sampling, "stream": True})

    def text_so_far(self, chunk: dict, previous: str) -> str:
        return chunk.get("text", previous)

    def tokens_so_far(self, chunk: dict) -> int | None:
        return (chunk.get("meta_info") or {}).get("completion_tokens")

    def reply_acceptance(self, chunk: dict) -> ReplyAcceptance | None:
        return sglang_acceptance(chunk.get("meta_info") or {})

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        return None


class LlamaCppAdapter(OpenAIChat):
    """llama-server's OpenAI chat, with its prompt cache off: every point re-sends the suite's prompts, and
    a cached prompt would make the later points' TTFT a cache hit instead of a prefill."""

    name = "llamacpp"
    version_routes = (("/props", "build_info"),)
    fresh_connections = True

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest:
        ask = super().request(prompt, max_tokens, model)
        return StreamRequest(ask.path, ask.body | {"cache_prompt": False})

    def reply_acceptance(self, chunk: dict) -> ReplyAcceptance | None:
        return llamacpp_acceptance(chunk["timings"]) if chunk.get("timings") else None

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        return None


ADAPTERS: dict[str, type] = {
    "vllm": VllmAdapter,
    "sglang": SGLangAdapter,
    "tensorrt_llm": TensorRTLLMAdapter,
    "llamacpp": LlamaCppAdapter,
}


def adapter_for(engine: str) -> EngineAdapter:
    if engine not in ADAPTERS:
        raise ValueError(f"unknown engine '{engine}': choose one of {', '.join(ADAPTERS)}")
    return ADAPTERS[engine]()


def bearer(token: str | None) -> dict[str, str]:
    """The Authorization header for a server that needs a token (none without one)."""
    return {"Authorization": f"Bearer {token}"} if token else {}


def _json_reply(http: httpx.Client, path: str) -> dict | None:
    """GET `path` as a JSON object; None where the server has no such route or says something else."""
    try:
        reply = http.get(path, timeout=10)
        found = reply.json() if reply.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return found if isinstance(found, dict) else None


def engine_version(http: httpx.Client, adapter: EngineAdapter) -> str | None:
    """The version the server reports (see the module docstring); None where it does not say."""
    for path, key in adapter.version_routes:
        found = (_json_reply(http, path) or {}).get(key)
        if found is not None:
            return str(found)
    return None


def served_model(http: httpx.Client) -> str | None:
    """The first model the server lists at GET /v1/models; None where it lists none."""
    models = (_json_reply(http, "/v1/models") or {}).get("data") or []
    return str(models[0].get("id")) if models and isinstance(models[0], dict) and models[0].get("id") else None
