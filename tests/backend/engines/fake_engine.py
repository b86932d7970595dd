"""A stand-in for a serving engine with speculative decoding, speaking each engine's protocol the way
backend/engines/adapters.py reads it: every request streams `max_tokens` tokens in steps of two (one
accepted draft of `draft` proposed, plus the target's own token), and the server counts the steps as
vLLM and TensorRT-LLM do. AL is therefore exactly 2 whichever way an adapter reads it, and the
acceptance rate 1 / draft. `python -m tests.backend.engines.fake_engine --engine vllm --port N
--draft-len D` runs one as a server, as a launch template would."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

from tests.helpers.workers import free_port

DRAFT = 3  # drafts proposed per step; one is accepted


class FakeEngine:
    def __init__(self, engine: str, draft: int = DRAFT) -> None:
        self.engine = engine
        self.draft = draft
        self.steps = 0
        self.pending_iterations: list[dict] = []  # TensorRT-LLM's: handed out once
        self.app = self._app()
        self.port = free_port()
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

    def _count(self, steps: int) -> None:
        self.steps += steps
        stats = {"numDraftTokens": self.draft * steps, "numAcceptedTokens": steps, "numRequestsWithDraftTokens": steps}
        self.pending_iterations.append({"iter": len(self.pending_iterations), "specDecodingStats": stats})

    def _app(self) -> FastAPI:
        app = FastAPI()

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

        @app.post("/v1/completions")
        async def completions(request: Request):
            tokens = (await request.json())["max_tokens"]
            steps = tokens // 2
            chunks = [{"choices": [{"text": "ab"}]} for _ in range(steps)]
            chunks.append({"choices": [], "usage": {"completion_tokens": tokens}})
            self._count(steps)
            return sse(chunks)

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
            chunks = [
                {"text": "ab" * (i + 1), "meta_info": {"completion_tokens": 2 * (i + 1), "spec_verify_ct": i + 1}}
                for i in range(tokens // 2)
            ]
            return sse(chunks)

        @app.post("/completion")
        async def completion(request: Request):
            tokens = (await request.json())["n_predict"]
            steps = tokens // 2
            chunks = [{"content": "ab", "stop": False} for _ in range(steps)]
            timings = {
                "predicted_n": tokens,
                "predicted_ms": 10.0,
                "draft_n": self.draft * steps,
                "draft_n_accepted": steps,
            }
            chunks.append({"content": "", "stop": True, "timings": timings})
            return sse(chunks)

        return app


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--draft-len", type=int, default=DRAFT)
    options = parser.parse_args()
    fake = FakeEngine(options.engine, options.draft_len)
    uvicorn.run(fake.app, port=options.port, log_level="error")
