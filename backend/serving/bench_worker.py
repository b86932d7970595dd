"""`bench stream` and `bench start`: what the HTTP worker costs. The same prompts are decoded in this
process and through a worker process started for the purpose (alternating, same model, same drafter),
and it reports tokens/s through the stream over tokens/s in process, the time from sending a request
to its first step record, and the worker's resident memory with the model loaded; and how long a
worker takes to become ready, compiled or not, on a first and a later start.

Knows nothing about printing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from backend.core.engine import GenerationSettings
from backend.core.metrics import geomean
from backend.core.models import load_model
from backend.core.ports import free_loopback_port
from backend.drafters import DrafterOptions, build_drafter
from backend.lab.prompts import Question
from backend.lab.runner import Runner
from backend.serving.client import WorkerClient

ROOT = Path(__file__).resolve().parents[2]


def resident_mb(pid: int) -> dict:
    """Current and peak resident memory of a process, from /proc (Linux)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return {"rss_mb": fields.get("VmRSS"), "peak_rss_mb": fields.get("VmHWM")}


def load_flags(dtype: str = "auto", allow_remote_code: bool = False) -> list[str]:
    """The worker's flags for how it loads models beyond --device and --compile (cli/common.add_device_args)."""
    return ["--dtype", dtype, *(["--allow-remote-code"] if allow_remote_code else [])]


def start_worker(
    target: str,
    device: str,
    compile: str = "off",
    env: dict[str, str] | None = None,
    loading: list[str] | None = None,
) -> tuple[subprocess.Popen, str]:
    """A worker process serving `target` (with `env` added to this process's environment and `loading`,
    from load_flags, to its command), once its /health says ready: the target loaded and, with `compile` on,
    its graphs built and warmed."""
    port = free_loopback_port()
    db = Path(tempfile.mkdtemp(prefix="specscope-bench-")) / "runs.duckdb"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "backend",
            "worker",
            "--port",
            str(port),
            "--db",
            str(db),
            "--default-target",
            target,
            "--device",
            device,
            "--compile",
            compile,
            *(loading or []),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "SPECSCOPE_TOKEN": "", **(env or {})},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 600
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).json()["status"] == "ready":
                return process, url
        except (httpx.TransportError, ValueError, KeyError):
            pass
        if process.poll() is not None:
            raise RuntimeError("the worker exited while starting")
        time.sleep(0.3)
    process.kill()
    raise TimeoutError("the worker did not become ready")


def start_times(target: str, device: str, dtype: str = "auto", allow_remote_code: bool = False) -> list[dict]:
    """Seconds from launching a worker to its ready /health: with --compile off, then --compile on twice
    with one new inductor cache folder (a first start, which builds the graphs, then a later one)."""
    loading = load_flags(dtype, allow_remote_code)
    times = []
    with tempfile.TemporaryDirectory(prefix="specscope-inductor-") as inductor_cache:
        for compile, start in (("off", "first"), ("on", "first"), ("on", "later")):
            launched = time.perf_counter()
            process, _ = start_worker(target, device, compile, {"TORCHINDUCTOR_CACHE_DIR": inductor_cache}, loading)
            times.append({"compile": compile, "start": start, "seconds": round(time.perf_counter() - launched, 1)})
            process.terminate()
            process.wait(timeout=30)
    return times


def stream_benchmark(
    target_spec: str,
    questions: list[Question],
    drafter: str,
    draft_len: int | str,
    max_new_tokens: int,
    repeats: int,
    device: str = "auto",
    compile: str = "off",
    dtype: str = "auto",
    allow_remote_code: bool = False,
) -> dict:
    """In process and through the worker on the same path (`compile`) and the same load flags, alternating."""
    target = load_model(target_spec, device=device, dtype=dtype, allow_remote_code=allow_remote_code, compile=compile)
    runner = Runner(target)
    runner.engine.passes.warm_up()
    local_drafter = build_drafter(drafter, target, DrafterOptions())
    settings = GenerationSettings(max_new_tokens=max_new_tokens, draft_len=draft_len)
    process, url = start_worker(target_spec, device, compile, loading=load_flags(dtype, allow_remote_code))
    client = WorkerClient(url)
    try:
        idle_memory = resident_mb(process.pid)
        rows = []
        for repeat in range(repeats):
            for question in questions:
                order = ("local", "worker") if (repeat + len(rows)) % 2 == 0 else ("worker", "local")
                measured = {}
                for where in order:
                    if where == "local":
                        result = runner.run(question.turns, local_drafter, settings)
                        measured["local"] = (len(result.output_ids) / result.wall_s, result.output_ids, None)
                    else:
                        measured["worker"] = _through_worker(client, question, drafter, draft_len, max_new_tokens)
                rows.append(
                    {
                        "question_id": question.question_id,
                        "in_process_tokens_per_s": measured["local"][0],
                        "worker_tokens_per_s": measured["worker"][0],
                        "ratio": measured["worker"][0] / measured["local"][0],
                        "first_step_s": measured["worker"][2],
                        "same_output": measured["local"][1] == measured["worker"][1],
                    }
                )
        loaded_memory = resident_mb(process.pid)
    finally:
        client.close()
        process.terminate()
        process.wait(timeout=30)
    return {
        "target": target_spec,
        "drafter": drafter,
        "draft_len": draft_len,
        "max_new_tokens": max_new_tokens,
        "rows": rows,
        "geomean_worker_over_in_process": geomean([r["ratio"] for r in rows]),
        "median_first_step_s": sorted(r["first_step_s"] for r in rows)[len(rows) // 2],
        "worker_memory_after_load_mb": idle_memory,
        "worker_memory_after_runs_mb": loaded_memory,
        "all_outputs_equal": all(r["same_output"] for r in rows),
    }


def _through_worker(
    client: WorkerClient, question: Question, drafter: str, draft_len: int | str, max_new_tokens: int
) -> tuple[float, list[int], float]:
    """(tokens/s from sending the request to the last step, output ids, seconds to the first step)."""
    sent = time.perf_counter()
    first_step = last_step = None
    output: list[int] = []
    for record in client.generate(
        messages=list(question.turns),
        drafter=drafter,
        draft_len=draft_len,
        max_new_tokens=max_new_tokens,
        baseline=False,
    ):
        if record["type"] == "step":
            last_step = time.perf_counter()
            first_step = first_step or last_step
            output += record["emitted"]
    return len(output) / (last_step - sent), output, first_step - sent
