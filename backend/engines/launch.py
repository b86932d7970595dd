"""Start a serving engine for one configuration and stop it after: D is a server-start option in vLLM,
SGLang, TensorRT-LLM and llama.cpp, so a sweep over D is one server per D. The user gives the command as
a template; `{draft_len}`, `{draft_len_plus_one}` (SGLang's draft-token count for a chain of D) and
`{port}` in it are replaced (plain text replacement, so the JSON braces of a `--speculative-config` stay
as written), the command runs without a shell, and the server counts as up
once GET /health answers 200 (all four engines serve it). Its output goes to a log file whose end is
quoted if it never comes up. Knows nothing about what is measured.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from backend.core.ports import free_loopback_port


def launch_command(template: str, draft_len: int, port: int) -> list[str]:
    """The template with its placeholders filled, split as a shell would (but run without one)."""
    filled = template.replace("{draft_len_plus_one}", str(draft_len + 1))
    return shlex.split(filled.replace("{draft_len}", str(draft_len)).replace("{port}", str(port)))


def check_template(template: str) -> None:
    """A ValueError in one sentence for a template that cannot start a server on the port it is given."""
    try:
        command = launch_command(template, 1, 1)
    except ValueError as error:  # unbalanced quotes
        raise ValueError(f"the launch command cannot be split into arguments ({error}): {template}") from error
    if not command:
        raise ValueError("the launch command is empty")
    if "{port}" not in template:
        raise ValueError("the launch command must contain {port}: SpecScope picks the port for each server")


@contextlib.contextmanager
def launched_server(template: str, draft_len: int, timeout_s: float = 1800.0) -> Iterator[str]:
    """Run the server for this D on a free loopback port until the block ends; yields its URL."""
    port = free_loopback_port()
    command = launch_command(template, draft_len, port)
    log_path = Path(tempfile.mkdtemp(prefix="specscope-engine-")) / "server.log"
    with log_path.open("w") as log:
        try:
            # its own process group, so stopping it stops the workers it spawns too (tensor-parallel ranks)
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as error:
            raise RuntimeError(f"cannot start `{command[0]}`: {error.strerror}") from error
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_for_health(process, url, timeout_s, log_path)
            yield url
        finally:
            _stop(process)


def _stop(process: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL a minute later if it is still there."""
    for sent in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sent)
        try:
            process.wait(timeout=60)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_for_health(process: subprocess.Popen, url: str, timeout_s: float, log_path: Path) -> None:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode} before it was up:\n{_tail(log_path)}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the server did not answer {url}/health within {timeout_s:.0f} s:\n{_tail(log_path)}")


def _tail(log_path: Path, lines: int = 20) -> str:
    return "\n".join(log_path.read_text(errors="replace").splitlines()[-lines:])
