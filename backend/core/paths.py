"""Where SpecScope's files are: the data SpecScope ships (prompt suites, trained drafters) and where it
writes (the run store).

From a checkout both are the checkout's `data/`. When installed with pip, the shipped data is the
`specscope_data` package the wheel carries (pyproject maps `data/` to it) and the store goes to
$SPECSCOPE_HOME, else ~/.local/share/specscope. Knows nothing about what the files hold.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"


def shipped_data() -> Path:
    """The folder holding prompts/ and drafters/."""
    if (CHECKOUT_DATA / "prompts").is_dir():
        return CHECKOUT_DATA
    spec = importlib.util.find_spec("specscope_data")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("SpecScope's data folder is missing: reinstall the package or run from a checkout")
    return Path(next(iter(spec.submodule_search_locations)))


def user_data() -> Path:
    """The folder SpecScope writes to (created on demand by its users)."""
    if "SPECSCOPE_HOME" in os.environ:
        return Path(os.environ["SPECSCOPE_HOME"])
    if (CHECKOUT_DATA / "prompts").is_dir():
        return CHECKOUT_DATA
    return Path.home() / ".local" / "share" / "specscope"
