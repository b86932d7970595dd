"""llama.cpp's `llama-server` for the tests that drive a real serving engine: built once by
scripts/build_llama_server.sh (a few minutes the first time, then cached), serving the embedded default
GGUF on loopback with its n-gram speculative decoding ("ngram-simple": the draft is the continuation of
the last matching bigram in the context, up to D tokens)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from backend.core.models import embedded_default_path
from tests.helpers.workers import ROOT


def llama_server() -> str:
    """The binary's path (built here if the cache has none)."""
    built = subprocess.run(
        ["bash", str(ROOT / "scripts" / "build_llama_server.sh")],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return built.stdout.strip().splitlines()[-1]


def ngram_template(binary: str) -> str:
    """A `--launch` template: the default model with n-gram drafts of up to {draft_len} tokens."""
    model = shlex.quote(str(embedded_default_path()))
    return (
        f"{shlex.quote(binary)} -m {model} --host 127.0.0.1 --port {{port}} -t 2 -c 2048 "
        "--spec-type ngram-simple --spec-ngram-simple-size-n 2 --spec-ngram-simple-size-m {draft_len}"
    )


def plain_template(binary: str) -> str:
    """The same server without speculative decoding (its D = 0 point)."""
    model = shlex.quote(str(embedded_default_path()))
    return f"{shlex.quote(binary)} -m {model} --host 127.0.0.1 --port {{port}} -t 2 -c 2048"
