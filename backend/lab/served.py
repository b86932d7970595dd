"""What this process has decoded since it started, per target: the running totals a serving engine
exports as counters (vLLM's spec-decode counts, and the tokens generated), fed by the run recorder as it
stores each batch of steps, so they count exactly the steps the store holds and nothing else (imported
reference sweeps are not decoded here). Totals only grow and start at zero with the process, as a
Prometheus counter does; a scraper measures by the difference of two reads.

Steps that drafted nothing (plain decoding, or a drafter with nothing to propose) add generated tokens
and no drafts, as in vLLM. Safe to feed from the compute thread while the HTTP threads read. Knows
nothing about HTTP or the Prometheus format.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from backend.core.metrics import AcceptanceCounter, tree_depth


@dataclass
class TargetTotals:
    acceptance: AcceptanceCounter = field(default_factory=AcceptanceCounter)
    generated_tokens: int = 0


class ServedCounts:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._targets: dict[str, TargetTotals] = {}

    def add_steps(self, target: str, records: Sequence[dict]) -> None:
        """Count stored step records (each with `drafted`, `accepted` and `emitted`) of one target."""
        with self._lock:
            totals = self._targets.setdefault(target, TargetTotals())
            for record in records:
                totals.acceptance.add(len(record["drafted"]), record["accepted"], tree_depth(record.get("parents")))
                totals.generated_tokens += len(record["emitted"])

    def snapshot(self) -> dict[str, TargetTotals]:
        """A copy of every target's totals, by the target's name as runs were asked for it."""
        with self._lock:
            return copy.deepcopy(self._targets)


SERVED = ServedCounts()  # the process's one set of totals
