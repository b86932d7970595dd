"""Where a running worker can be found: the worker writes its URL to a small file beside the DuckDB
store it holds (`<store>.worker.json`: url and process id) and removes it when it stops; a client with
no URL configured reads the file for the store it would use, so a command line finds the worker that
`make run` started on a random port. A file left by a worker that died (its process is gone) is
ignored and removed.

Knows nothing about HTTP or the store's contents.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
from pathlib import Path


def default_store() -> Path:
    """The store a process uses when told nothing: $SPECSCOPE_DB, else the data folder's file."""
    from backend.lab.store import default_db_path  # DuckDB and pandas come in only when asked for

    return default_db_path()


def address_file(store: str | Path | None = None) -> Path:
    path = Path(store) if store is not None else default_store()
    return path.with_name(path.name + ".worker.json")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def publish(store: str | Path | None, url: str) -> Path:
    """Write this process's URL beside `store`; it is removed when the process exits."""
    path = address_file(store)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"url": url, "pid": os.getpid()}))
    temporary.replace(path)
    atexit.register(withdraw, store)
    return path


def withdraw(store: str | Path | None) -> None:
    """Remove the URL file beside `store` if this process wrote it."""
    path = address_file(store)
    with contextlib.suppress(OSError, ValueError, KeyError):
        if json.loads(path.read_text())["pid"] == os.getpid():
            path.unlink()


def published_url(store: str | Path | None = None) -> str | None:
    """The URL of the live worker that holds `store` (default: the default store), or None; a stale
    file (its process gone) is removed."""
    path = address_file(store)
    try:
        record = json.loads(path.read_text())
        url, pid = str(record["url"]), int(record["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not _alive(pid):
        with contextlib.suppress(OSError):
            path.unlink()
        return None
    return url
