"""Shared fixtures: tiny random models for fast tests, the real embedded default for the slow set."""

from __future__ import annotations

import pytest
import torch

from tests.tiny import tiny_llama

torch.set_num_threads(max(1, torch.get_num_threads()))


@pytest.fixture(scope="session")
def tiny():
    return tiny_llama(seed=0)


@pytest.fixture(scope="session")
def tiny_other():
    """A different random model with the same tokenizer: a weak external draft."""
    return tiny_llama(seed=1, layers=2)


@pytest.fixture(scope="session")
def default_model():
    from backend.models import load_model

    return load_model("default")
