"""The training tests' shared data: the tiny target's self-distillation, cached once per module."""

from __future__ import annotations

import pytest

from backend.training import student
from backend.training.dataset import distil
from tests.helpers.tiny import tiny_instructions


@pytest.fixture(scope="module")
def distilled(tiny, tmp_path_factory):
    """(train data, validation data, validation instructions) with the target's final hidden states."""
    root = tmp_path_factory.mktemp("distil")
    instructions = tiny_instructions(64)
    layers = student.training_layers(tiny)
    train_data = distil(tiny, instructions, layers, "train", 24, cache_root=root)
    validation_data = distil(tiny, instructions, layers, "validation", 24, cache_root=root)
    return train_data, validation_data, [i for i in instructions if i.split == "validation"] or instructions[:2]
