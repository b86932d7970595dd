"""Models the worker keeps loaded, least recently used first out when over a memory budget, and the
drafters built on them (a drafter such as `suffix` keeps a global tree across requests, so it must
outlive one request; live runs decode with forks of it and hand back what they learnt after the job).

Knows nothing about HTTP or decoding.
"""

from __future__ import annotations

import gc
import json
import threading
from collections import OrderedDict
from collections.abc import Callable

import torch

from backend.core.drafter import Drafter
from backend.core.models import LoadedModel, load_model
from backend.core.target_passes import prepare
from backend.drafters import DrafterOptions, build_drafter


def model_bytes(model: LoadedModel) -> int:
    return sum(p.numel() * p.element_size() for p in model.model.parameters())


class ModelCache:
    def __init__(
        self,
        budget_bytes: int,
        device: str = "auto",
        dtype: str = "auto",
        allow_remote_code: bool = False,
        loader: Callable[..., LoadedModel] = load_model,
        compile: str = "off",
    ) -> None:
        self.budget_bytes = budget_bytes
        self.device = device
        self.dtype = dtype
        self.allow_remote_code = allow_remote_code
        self.compile = compile
        self.loader = loader
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self.other_precisions: set[str] = set()  # keys of targets held in a dtype besides the worker's (sweeps)
        # (target, drafter name, options) -> (drafter, the model specs it holds)
        self._drafters: dict[tuple[str, str, str], tuple[Drafter | None, set[str]]] = {}
        self._lock = threading.Lock()  # guards the dicts; never held while loading
        self._load_lock = threading.Lock()  # one load at a time
        self.loading: str | None = None
        self.warming: str | None = None  # what is being compiled, while a load warms its model

    def get(self, spec: str, dtype: str | None = None) -> LoadedModel:
        """The loaded model for a spec (in `dtype`, default the worker's), loading it (and evicting
        others) if needed; another dtype of a spec is kept as '<spec> [<dtype>]'."""
        key = spec if dtype is None else f"{spec} [{dtype}]"
        if dtype is not None:
            self.other_precisions.add(key)
        found = self.peek(key, touch=True)
        if found is not None:
            return found
        with self._load_lock:
            found = self.peek(key, touch=True)  # loaded by another thread meanwhile
            if found is not None:
                return found
            self.loading = key
            try:
                model = self.loader(
                    spec,
                    device=self.device,
                    dtype=dtype or self.dtype,
                    allow_remote_code=self.allow_remote_code,
                    compile=self.compile,
                )
                # compiled (or first-used) here, so no request's timed decoding pays for it
                model.compile = prepare(
                    model.model, model.compile, lambda message: setattr(self, "warming", f"{key}: {message}")
                )
            finally:
                self.loading = None
                self.warming = None
            with self._lock:
                self._models[key] = model
                self._evict(keep=key)
            return model

    def drafter(self, target_spec: str, name: str, options: DrafterOptions) -> Drafter | None:
        """The drafter `name` for a loaded target, built once per (target, name, options)."""
        target = self.get(target_spec)
        key = (target_spec, name, json.dumps(options.__dict__, sort_keys=True))
        with self._lock:
            if key in self._drafters:
                return self._drafters[key][0]
        loaded = {target_spec}  # every model the drafter holds: evicting any of them drops the drafter

        def load(spec: str, **_) -> LoadedModel:
            loaded.add(spec)
            return self.get(spec)

        drafter = build_drafter(name, target, options, load=load)
        with self._lock:
            self._drafters.setdefault(key, (drafter, loaded))
            return self._drafters[key][0]

    def loaded(self) -> list[str]:
        with self._lock:
            return list(self._models)

    def peek(self, spec: str, touch: bool = False) -> LoadedModel | None:
        """The model if loaded (touch: count this as a use for the LRU order); never loads."""
        with self._lock:
            model = self._models.get(spec)
            if model is not None and touch:
                self._models.move_to_end(spec)
            return model

    def _evict(self, keep: str) -> None:
        while sum(model_bytes(m) for m in self._models.values()) > self.budget_bytes and len(self._models) > 1:
            victim = next(spec for spec in self._models if spec != keep)
            del self._models[victim]
            self._drafters = {key: entry for key, entry in self._drafters.items() if victim not in entry[1]}
            gc.collect()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
