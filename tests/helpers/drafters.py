"""Every registered drafter built on tiny random models, so the losslessness tests cover each one the
registry lists (a new drafter is tested the moment its registry line exists)."""

from __future__ import annotations

from backend.core.drafter import Drafter
from backend.core.models import LoadedModel
from backend.drafters import REGISTRY, DrafterOptions, build_drafter

EVERY_DRAFTER = list(REGISTRY)


def registered_drafter(name: str, target: LoadedModel, other: LoadedModel, exit_layer: int = 1) -> Drafter | None:
    """Drafter `name` for `target`: trained kinds with fresh weights, the draft-model drafter over `other`,
    layer-skip exiting after `exit_layer`, the rest with their default options."""
    spec = REGISTRY.get(name)
    if spec is not None and spec.untrained is not None:
        return spec.untrained(target)
    options = DrafterOptions(draft_model="tiny-draft", layerskip_exit_layer=exit_layer)
    return build_drafter(name, target, options, load=lambda *args, **kwargs: other)
