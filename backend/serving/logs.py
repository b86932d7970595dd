"""The worker's log, written with Python's logging module to a file (by default `worker.log` beside
the run store, rotated at 10 MB) and to stderr: every request (method, path, status, milliseconds),
every job's start and end (id, kind, drafter, duration, outcome) and the full traceback of every
failure. The serving modules log to loggers under `backend.serving`; this module only routes them.

Knows nothing about HTTP, jobs or models.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

LOG_NAME = "worker.log"
ROOT_LOGGER = "backend.serving"
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MAX_BYTES = 10 * 2**20
BACKUPS = 3


def default_log_file(store_path: Path) -> Path:
    return store_path.parent / LOG_NAME


def configure(log_file: Path) -> Path:
    """Send the serving loggers to `log_file` and stderr (replacing earlier handlers); returns the file."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    logger = logging.getLogger(ROOT_LOGGER)
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
        handler.close()
    formatter = logging.Formatter(FORMAT)
    for handler in (
        logging.handlers.RotatingFileHandler(log_file, maxBytes=MAX_BYTES, backupCount=BACKUPS, encoding="utf-8"),
        logging.StreamHandler(sys.stderr),
    ):
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return log_file
