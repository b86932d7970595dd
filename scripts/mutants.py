"""Breaks the engine on purpose, one mutation at a time, and names the tests that catch each: the check that
the suite can fail where losslessness is decided. Each mutant is a copy of the checkout with one line changed:

- acceptance: greedy verification accepts one more draft than matched (verify.py);
- residual: a rejected draft's correction is drawn from the target's p instead of the residual max(0, p - q);
- rollback: after a step, one rejected position stays in the cache (eager and static caches alike);
- tree-mask: a token tree's node sees every earlier node (a chain's causal mask), its siblings included.

    python scripts/mutants.py                      # the tiny-model tests of tests/backend/core on each mutant
    python scripts/mutants.py tests/backend        # other test paths
    python scripts/mutants.py --only residual      # one mutant

Exits 1 when a mutant survives (no test failed). Knows nothing of what the tests check: it only reads
pytest's list of failures."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# name: (file, the line's text as it is, as the mutant has it)
MUTANTS = {
    "acceptance": (
        "backend/core/verify.py",
        "    accepted = matches.cumprod(dim=0).sum().view(1)  # [1] a\n",
        "    accepted = (matches.cumprod(dim=0).sum() + 1).clamp(max=drafted.shape[0]).view(1)  # [1] a\n",
    ),
    "residual": (
        "backend/core/verify.py",
        "    residual = torch.clamp(p_a - _next_draft_row(draft_probs, drafted, accepted, p_a), min=0.0)  # [V]\n",
        "    residual = p_a.clone()  # [V]\n",
    ),
    "rollback": (
        "backend/core/kv.py",
        "    surplus = cache.get_seq_length() - keep\n",
        "    surplus = max(cache.get_seq_length() - keep - 1, 0)\n",
    ),
    "rollback-static": (
        "backend/core/static_kv.py",
        "        self.lengths = kept\n",
        "        self.lengths = torch.minimum(kept + 1, self.lengths)\n",
    ),
    "tree-mask": (
        "backend/core/tree.py",
        "        mask[node + 1] |= mask[parent + 1]\n",
        "        mask[node + 1, : node + 2] = True\n",
    ),
}
# the rollback mutant changes both caches: the eager path's (kv.py) and the compiled path's (static_kv.py)
GROUPS = {
    "acceptance": ["acceptance"],
    "residual": ["residual"],
    "rollback": ["rollback", "rollback-static"],
    "tree-mask": ["tree-mask"],
}
COPIED = ("backend", "tests", "ui", "pages", "data", "app.py", "pyproject.toml", "scripts")


def mutant_checkout(name: str, folder: Path) -> None:
    for entry in COPIED:
        source = ROOT / entry
        if source.is_dir():
            shutil.copytree(source, folder / entry, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(source, folder / entry)
    for part in GROUPS[name]:
        path, original, broken = MUTANTS[part]
        text = (folder / path).read_text()
        if text.count(original) != 1:
            raise SystemExit(f"{path} no longer holds the line mutant '{part}' changes: update scripts/mutants.py")
        (folder / path).write_text(text.replace(original, broken))


def failures(name: str, paths: list[str], workers: str) -> tuple[list[str], float]:
    with tempfile.TemporaryDirectory(prefix=f"mutant-{name}-") as temporary:
        folder = Path(temporary)
        mutant_checkout(name, folder)
        command = [sys.executable, "-m", "pytest", "-q", "-m", "not slow", "-rf", "-p", "no:cacheprovider"]
        command += ["-n", workers, "--dist", "loadscope", *paths]
        started = time.time()
        done = subprocess.run(command, cwd=folder, capture_output=True, text=True)
        failed = sorted(set(re.findall(r"^FAILED (\S+)", done.stdout, flags=re.MULTILINE)))
        return failed, time.time() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", default=["tests/backend/core"], help="test paths (tests/backend/core)")
    parser.add_argument("--only", choices=sorted(GROUPS), action="append", help="run these mutants only")
    parser.add_argument("--workers", default="2", help="pytest-xdist processes (2)")
    args = parser.parse_args()
    survived = []
    for name in args.only or list(GROUPS):
        failed, seconds = failures(name, args.paths, args.workers)
        print(f"## {name}: {len(failed)} failing tests ({seconds:.0f} s)", flush=True)
        for test in failed:
            print(f"- {test}", flush=True)
        if not failed:
            survived.append(name)
    if survived:
        print(f"survived: {', '.join(survived)}", file=sys.stderr)
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
