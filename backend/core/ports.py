"""A free TCP port on loopback, for the processes SpecScope starts on this machine (its worker, a serving
engine launched for a sweep, test servers). Knows nothing about what listens there."""

from __future__ import annotations

import socket


def free_loopback_port() -> int:
    """A port no process holds now (the OS picks it; another process could still take it first)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
