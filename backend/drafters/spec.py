"""What a drafter declares about itself, so every surface is generated from one place.

Each drafter module ends with one `SPEC = DrafterSpec(...)`: its name, a one-line summary, an options
dataclass whose fields carry their bounds and help (made with `option()`), and a build function. The
registry (`backend/drafters/__init__.py`) lists the specs; the CLI flags, the worker's request model,
`/models` and the dashboard's option widgets are all derived from them, and the losslessness tests
loop over them.

Option names are global (`ngram_min`, `suffix_max_depth`, `drafter_path`): they are the CLI flags
(`--ngram-min`), the worker's request fields and the stored options, so two drafters may share a field
only with the same meaning, default and bounds. This module knows no drafter.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from backend.core.drafter import Drafter
from backend.core.models import LoadedModel

LoadModel = Callable[..., LoadedModel]  # load_model's signature: (spec, device=, dtype=) -> LoadedModel


def option(
    default: Any,
    help: str,
    *,
    ge: float | None = None,
    le: float | None = None,
    gt: float | None = None,
    label: str | None = None,
) -> Any:
    """A drafter option: a dataclass field whose metadata holds its help text and bounds."""
    return field(default=default, metadata={"help": help, "ge": ge, "le": le, "gt": gt, "label": label})


@dataclass(frozen=True)
class OptionInfo:
    """One option as the surfaces see it: name, Python type (int, float or str; `optional` if None is allowed,
    meaning "the drafter's own default"), default, bounds and help."""

    name: str
    kind: type
    optional: bool
    default: Any
    help: str
    label: str
    ge: float | None = None
    le: float | None = None
    gt: float | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def check(self, value: Any) -> Any:
        """`value` if it lies within the bounds, else ValueError with a one-sentence reason."""
        if value is None or self.kind is str:
            return value
        if (
            (self.ge is not None and value < self.ge)
            or (self.le is not None and value > self.le)
            or (self.gt is not None and value <= self.gt)
        ):
            raise ValueError(f"{self.name} must be {self.bounds()}, got {value}")
        return value

    def bounds(self) -> str:
        low = f">= {self.ge:g}" if self.ge is not None else f"> {self.gt:g}" if self.gt is not None else ""
        high = f"<= {self.le:g}" if self.le is not None else ""
        return " and ".join(part for part in (low, high) if part) or "any value"

    def parse(self, text: str) -> Any:
        """A command-line value: converted to the option's type, then checked."""
        try:
            value = self.kind(text)
        except ValueError as error:
            raise ValueError(
                f"{self.name} must be a{'n' if self.kind is int else ''} {self.kind.__name__}, got '{text}'"
            ) from error
        return self.check(value)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "type": self.kind.__name__,
            "optional": self.optional,
            "default": self.default,
            "help": self.help,
            "label": self.label,
            "ge": self.ge,
            "le": self.le,
            "gt": self.gt,
        }


@dataclass(frozen=True)
class DrafterSpec:
    """A drafter as the registry knows it.

    build(target, options, load) -> Drafter: `options` is an instance of `options`; `load` loads an external
    model (the draft-model drafter's) on the target's device.
    trained: the drafter needs a weights folder trained for the target; it is offered only where one exists.
    untrained(target) -> Drafter: a trained kind with fresh weights (tests check losslessness with it).
    export(draft_len, schedule, options) -> {engine: fragment}: the same drafter's settings as serving engines
    spell them (vllm: the --speculative-config dict; sglang: server flags; tensorrt_llm: the config object),
    `schedule` being a fixed D per batch size.
    trees: the drafter proposes token trees when a request asks for them (DraftRequest.max_nodes > 0);
    the others propose chains whatever the tree budget.
    """

    name: str
    summary: str
    options: type
    build: Callable[[LoadedModel, Any, LoadModel], Drafter]
    trained: bool = False
    untrained: Callable[[LoadedModel], Drafter] | None = None
    export: Callable[[int, dict[int, int], Any], dict[str, Any]] | None = None
    trees: bool = False

    def option_infos(self) -> list[OptionInfo]:
        hints = get_type_hints(self.options)
        infos = []
        for f in dataclasses.fields(self.options):
            kind, optional = _plain_type(hints[f.name])
            meta = f.metadata
            infos.append(
                OptionInfo(
                    f.name,
                    kind,
                    optional,
                    f.default,
                    meta.get("help", ""),
                    meta.get("label") or f.name.replace("_", " "),
                    meta.get("ge"),
                    meta.get("le"),
                    meta.get("gt"),
                )
            )
        return infos


@dataclass(frozen=True)
class NoOptions:
    """For drafters without options."""


@dataclass(frozen=True)
class WeightsOptions:
    """The one option of a trained head: its weights folder."""

    drafter_path: str | None = option(
        None,
        "weights folder of a trained drafter (default: the one under data/drafters/ trained for the target)",
        label="weights folder",
    )


@dataclass(frozen=True)
class HeadOptions(WeightsOptions):
    """A trained head's options: its weights folder and the dtype it drafts in."""

    head_precision: str = option(
        "auto",
        "dtype a trained head or distilled draft model holds its weights in while drafting: float32, float16, "
        "bfloat16, or auto (for a float32 target on a CPU: float16 for a head, bfloat16 for a distilled draft "
        "model where the CPU has bf16 dot products; else the target's dtype); the target verifies every draft",
        label="head precision",
    )


def trained_spec(
    name: str,
    summary: str,
    load: Callable[[Path, LoadedModel], Drafter],
    untrained: Callable[[LoadedModel], Drafter],
    export: Callable[[int, dict[int, int], Any], dict[str, Any]] | None = None,
    trees: bool = False,
) -> DrafterSpec:
    """The spec of a trained head (EAGLE-3, MTP, DFlash, DSpark): built from `drafter_path`, else from the
    folder under data/drafters/ trained for this target, its weights held in `head_precision`."""

    def build(target: LoadedModel, options: HeadOptions, _load: LoadModel) -> Drafter:
        from backend.drafters.head_precision import head_dtype, hold_weights_in
        from backend.drafters.shipped import weights_folder

        dtype = head_dtype(options.head_precision, target)  # a wrong choice fails before any loading
        drafter = load(weights_folder(name, target, options.drafter_path), target)
        hold_weights_in(drafter.head, dtype)
        return drafter

    return DrafterSpec(name, summary, HeadOptions, build, trained=True, untrained=untrained, export=export, trees=trees)


def _plain_type(hint: Any) -> tuple[type, bool]:
    """int | None -> (int, True); float -> (float, False)."""
    args = [a for a in getattr(hint, "__args__", (hint,)) if a is not type(None)]
    return args[0], len(args) < len(getattr(hint, "__args__", (hint,)))
