"""One adapter per serving engine: how to ask it for one streamed completion, how to read the text, the
token count and the speculative-decoding figures out of its stream, and how to read its server-wide
counters. `measure.py` drives any of them the same way.

    vllm          POST /v1/completions (OpenAI, stream, usage in the last chunk); counters: GET /metrics (Prometheus)
    tensorrt_llm  POST /v1/completions (trtllm-serve, OpenAI); counters: GET /metrics (iteration statistics, JSON)
    sglang        POST /generate (native, stream; cumulative text and meta_info in every chunk); per reply
    llamacpp      POST /completion (llama-server, stream; timings in the last chunk); per reply

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

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest: ...

    def text_so_far(self, chunk: dict, previous: str) -> str: ...

    def tokens_so_far(self, chunk: dict) -> int | None: ...

    def reply_acceptance(self, chunk: dict) -> ReplyAcceptance | None: ...

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        """The server's running totals now; None for an engine that reports per reply only."""
        ...


class OpenAICompletions:
    """The OpenAI-compatible streamed completion vLLM and trtllm-serve share."""

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest:
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True}
        body["stream_options"] = {"include_usage": True}
        return StreamRequest("/v1/completions", body | ({"model": model} if model else {}))

    def text_so_far(self, chunk: dict, previous: str) -> str:
        return previous + "".join(choice.get("text") or "" for choice in chunk.get("choices") or [])

    def tokens_so_far(self, chunk: dict) -> int | None:
        return (chunk.get("usage") or {}).get("completion_tokens")

    def reply_acceptance(self, chunk: dict) -> ReplyAcceptance | None:
        return None


class VllmAdapter(OpenAICompletions):
    name = "vllm"

    def read_counts(self, http: httpx.Client) -> EngineCounts | None:
        reply = http.get("/metrics")
        reply.raise_for_status()
        return spec_decode_counts(reply.text)


class TensorRTLLMAdapter(OpenAICompletions):
    """trtllm-serve hands each iteration's statistics out once, so the adapter keeps the running totals."""

    name = "tensorrt_llm"

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


class LlamaCppAdapter:
    name = "llamacpp"

    def request(self, prompt: str, max_tokens: int, model: str | None) -> StreamRequest:
        return StreamRequest(
            "/completion", {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "stream": True}
        )

    def text_so_far(self, chunk: dict, previous: str) -> str:
        return previous + (chunk.get("content") or "")

    def tokens_so_far(self, chunk: dict) -> int | None:
        return (chunk.get("timings") or {}).get("predicted_n")

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
