"""The trainable drafter kinds, each as a `Mechanism` the training loop drives: which target hidden
states it trains on, a fresh head (its reduced vocabulary chosen from the training answers' token
counts), its loss, a drafter around the head for validation, and how its weights folder is written.

One entry per kind; the mechanisms themselves live in backend/drafters/. Knows nothing about data.
"""

from __future__ import annotations

from types import ModuleType

from backend.drafters import dflash, dspark, eagle3, mtp
from backend.training import student
from backend.training.loop import Mechanism


def _feature_mechanism(module: ModuleType, drafter_class) -> Mechanism:
    """EAGLE-3 and MTP share the feature-head interface (eagle3.py)."""
    return Mechanism(
        kind=module.KIND,
        layers=lambda target, settings: module.training_layers(target, **settings),
        new_head=lambda target, settings, counts: module.new_head(target, token_counts=counts, **settings),
        loss=lambda head, parts, batch: module.training_loss(head, parts, batch),
        drafter=lambda target, head: drafter_class(target, head),
        save=lambda head, target, out: eagle3.save(head, target, out),
    )


def _block_mechanism(module: ModuleType, drafter_class) -> Mechanism:
    """DFlash and DSpark: a block of drafts in one pass (dflash.py; DSpark adds its heads to it)."""
    return Mechanism(
        kind=module.KIND,
        layers=lambda target, settings: dflash.training_layers(target, settings),
        new_head=lambda target, settings, counts: module.new_head(target, token_counts=counts, **settings),
        loss=lambda head, parts, batch: module.training_loss(head, parts, batch),
        drafter=lambda target, head: drafter_class(target, head),
        save=lambda head, target, out: dflash.save_head(out, head, target),
    )


def _student_mechanism() -> Mechanism:
    """The distilled draft model: a whole small LM, saved as a Hugging Face folder (student.py)."""
    return Mechanism(
        kind=student.KIND,
        layers=lambda target, settings: student.training_layers(target),
        new_head=lambda target, settings, counts: student.new_student(target, **settings),
        loss=student.training_loss,
        drafter=student.drafter,
        save=student.save,
    )


MECHANISMS: dict[str, Mechanism] = {
    "eagle3": _feature_mechanism(eagle3, eagle3.Eagle3Drafter),
    "mtp": _feature_mechanism(mtp, mtp.MtpDrafter),
    "dflash": _block_mechanism(dflash, dflash.DFlashDrafter),
    "dspark": _block_mechanism(dspark, dspark.DSparkDrafter),
    "draft-model": _student_mechanism(),
}
