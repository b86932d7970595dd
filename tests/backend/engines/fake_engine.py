"""A stand-in for a serving engine with speculative decoding, speaking each engine's protocol the way
backend/engines/adapters.py reads it: every request streams `max_tokens` tokens in steps of two (one
accepted draft of `draft` proposed, plus the target's own token), and the server counts the steps as
vLLM and TensorRT-LLM do. AL is therefore exactly 2 whichever way an adapter reads it, and the
acceptance rate 1 / draft. `python -m tests.backend.engines.fake_engine --engine vllm --port N
--draft-len D [--exit-after R]` runs one as a server, as a launch template would (dying at request R + 1:
an engine that crashes mid-sweep)."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from backend.core.ports import free_loopback_port

DRAFT = 3  # drafts proposed per step; one is accepted


class FakeEngine:
    def __init__(
        self, engine: str, draft: int = DRAFT, exit_after: int | None = None, token: str | None = None
    ) -> None:
        self.engine = engine
        self.token = token  # where given, every route but /health needs `Authorization: Bearer <token>`
        self.draft = draft
        self.exit_after = exit_after  # requests answered before the process dies (an engine that crashes)
        self.answered = 0
        self.steps = 0
        self.pending_iterations: list[dict] = []  # TensorRT-LLM's: handed out once
        self.app = self._app()
        self.port = free_loopback_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.server = uvicorn.Server(uvicorn.Config(self.app, port=self.port, log_level="error"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> FakeEngine:
        self.thread.start()
        deadline = time.time() + 20
        while not self.server.started and time.time() < deadline:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def _answered(self) -> None:
        self.answered += 1
        if self.exit_after is not None and self.answered > self.exit_after:
            os._exit(1)

    def _count(self, steps: int) -> None:
        self.steps += steps
        stats = {"numDraftTokens": self.draft * steps, "numAcceptedTokens": steps, "numRequestsWithDraftTokens": steps}
        self.pending_iterations.append({"iter": len(self.pending_iterations), "specDecodingStats": stats})

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.middleware("http")
        async def check_token(request: Request, call_next):
            given = request.headers.get("authorization")
            if self.token and request.url.path != "/health" and given != f"Bearer {self.token}":
                return JSONResponse({"error": "invalid api key"}, status_code=401)
            return await call_next(request)

        @app.get("/health")
        async def health():
            return {"status": "ok"}

        def sse(chunks) -> StreamingResponse:
            async def lines():
                for chunk in chunks:
                    await asyncio.sleep(0.005)
                    yield f"data: {json.dumps(chunk)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(lines(), media_type="text/event-stream")

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            tokens = (await request.json())["max_tokens"]
            self._answered()
            steps = tokens // 2
            chunks = [{"choices": [{"index": 0, "delta": {"content": "ab"}}]} for _ in range(steps)]
            last = {"choices": [], "usage": {"completion_tokens": tokens}}
            if self.engine == "llamacpp":  # llama-server's per-reply counts
                last["timings"] = {"predicted_n": tokens, "draft_n": self.draft * steps, "draft_n_accepted": steps}
            chunks.append(last)
            self._count(steps)
            return sse(chunks)

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": "fake-model", "object": "model"}]}

        @app.get("/version")
        async def version():
            return {"version": f"{self.engine}-fake-1.0"}

        @app.get("/get_server_info")
        async def server_info():
            return {"version": "sglang-fake-1.0", "speculative_num_draft_tokens": self.draft}

        @app.get("/props")
        async def props():
            return {"build_info": "b1-fake"}

        @app.get("/metrics")
        async def metrics():
            if self.engine == "tensorrt_llm":
                handed, self.pending_iterations = self.pending_iterations, []
                return JSONResponse(handed)
            labels = 'engine="0",model_name="fake"'
            text = (
                f"vllm:spec_decode_num_drafts_total{{{labels}}} {self.steps}\n"
                f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {self.draft * self.steps}\n"
                f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {self.steps}\n"
                + "".join(
                    f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{labels},position="{k}"}} '
                    f"{self.steps if k == 0 else 0}\n"
                    for k in range(self.draft)
                )
            )
            return PlainTextResponse(text)

        @app.post("/generate")
        async def generate(request: Request):
            tokens = (await request.json())["sampling_params"]["max_new_tokens"]
            self._answered()
            chunks = [
                {"text": "ab" * (i + 1), "meta_info": {"completion_tokens": 2 * (i + 1), "spec_verify_ct": i + 1}}
                for i in range(tokens // 2)
            ]
            return sse(chunks)

        return app


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--draft-len", type=int, default=DRAFT)
    parser.add_argument("--exit-after", type=int, help="die after answering this many requests")
    options = parser.parse_args()
    fake = FakeEngine(options.engine, options.draft_len, options.exit_after)
    uvicorn.run(fake.app, port=options.port, log_level="error")
