"""Ahead-of-time compiled graphs of the fast path (AOTInductor packages), so a later start loads the
target's single-sequence graphs instead of tracing and freezing them again.

Why: inductor's on-disk cache (inductor_cache.py) spares a later start the lowering and the C++ build,
but not dynamo's tracing, functionalisation and weight freezing (over two minutes for the default target
on 2 CPU cores; AOTAutograd's cache refuses frozen graphs). An AOTInductor package is the finished
graph: a shared library holding the frozen, packed weights (torch/_inductor/__init__.py:
`aoti_compile_and_package`), kept unpacked in a folder and loaded by AOTInductor's package loader in
about a second. Two packages per target, built at the first start and loaded at later ones: one token
(B = 1, T = 1) and verify (B = 1, 2 <= T <= the widest compiled pass), both with the cache capacity
symbolic in steps of CAPACITY_STEP slots. The two are built side by side: each is exported here, saved,
and compiled by a child process (`python -m backend.core.aot_packages FOLDER`), since a build runs
mostly on one core. The KV cache tensors are inputs the graph writes in place, as
in the JIT graphs. Batches of two or more rows stay on torch.compile.

A package checks nothing when called (no guards): its folder's name is a digest of everything it depends
on (every weight's value, the model's config, the inductor settings, torch's build, the CPU, and the
source of this module and of the graph's), callers pass only shapes it was exported for (`fits`), and a
loaded package must match the eager module on a probe pass before it is used. Any failure leaves the
caller on torch.compile, with the reason kept in `failure`. A new build replaces the older packages of
the same weights. SPECSCOPE_PACKAGED_GRAPHS=off turns packages off.

Knows nothing about drafting, engines or serving.
"""

from __future__ import annotations

import copy
import ctypes
import hashlib
import inspect
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from functools import cached_property
from pathlib import Path

import torch
from torch import nn
from torch.export import Dim

from backend.core.errors import first_line
from backend.core.inductor_cache import tensors_digest
from backend.core.inductor_templates import adjust_templates
from backend.core.row_attention import attention_for
from backend.core.static_kv import CAPACITY_STEP, StaticKV
from backend.core.tree import Visibility

SWITCH = "SPECSCOPE_PACKAGED_GRAPHS"
MAX_CAPACITY_STEPS = 512  # caches of up to 65,536 slots take the packages; longer ones torch.compile
PROBE_CAPACITY, PROBE_LENGTH = 2 * CAPACITY_STEP, 5
PROGRAM, SETTINGS, ARCHIVE, LOG = "program.pt2", "settings.json", "package.pt2", "build.log"  # in a build's folder
SCRATCH_PREFIX, ABANDONED_AFTER_S = "building-", 3600  # a build's scratch folder; older ones were killed mid-build
PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
# a probe pass against the eager module, as a share of the largest value: fp32 packages differ by float
# rounding (~1e-5); bf16 ones by bf16's rounding at other points of fusion (logits 0.023, hidden states 0.036
# of their largest on the default target; the last layer's keys 0.2, so the first layer's are compared),
# while a wrong graph is off by its whole scale
EAGER_TOLERANCE = {torch.float32: 1e-2, torch.bfloat16: 0.15, torch.float16: 0.15}
BUILT_TOLERANCE = 1e-3  # the same probe against what the package computed where it was built: rounding only
EXPECTED = "expected.pt"  # in a package's folder: its outputs on the exported example, where it was built
EXPORTED_WIDTH = {1: 1, 2: 4}  # per kind: the width of the example it is exported (and checked) with


def packages_enabled(device: torch.device) -> bool:
    """Packages serve the CPU (where tracing costs minutes), unless SPECSCOPE_PACKAGED_GRAPHS=off."""
    return device.type == "cpu" and os.environ.get(SWITCH, "on") != "off"


def package_folder() -> Path:
    """Beside inductor's own cache ($TORCHINDUCTOR_CACHE_DIR where set), so clearing one clears both."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    return Path(cache_dir()) / "specscope_packages"


class PackagedGraphs:
    """The one-token and verify packages of one fused module (fast_forward._FusedModel), built or loaded on
    first use. `runner(width)` is the package serving that width, or None (then use torch.compile)."""

    def __init__(
        self,
        module: nn.Module,
        new_cache: Callable[[int, int], StaticKV],
        identity: str,
        settings: dict[int, dict],
        max_width: int,
        folder: Path | None = None,
    ) -> None:
        """`identity` names the weights and config the graphs freeze in (the caller hashes them once);
        `settings` are inductor's per kind (1: one token, 2: verify); `new_cache(capacity, batch)`."""
        self.module = module
        self.new_cache = new_cache
        self.settings = settings
        self.max_width = max_width
        self.folder = folder or package_folder()
        self.identity = identity
        self.failure: str | None = None
        self.built: list[str] = []  # names of the packages this process built (the others it loaded)
        self._runners: dict[int, Callable | None] = {}
        self._build_errors: dict[int, Exception] = {}  # kinds whose build failed, until _prepare reports it

    def fits(self, batch: int, cache: StaticKV) -> bool:
        """Whether a pass of `batch` rows over `cache` has a shape the packages were exported for."""
        capacity = cache.capacity
        within = capacity % CAPACITY_STEP == 0 and capacity <= MAX_CAPACITY_STEPS * CAPACITY_STEP
        return batch == 1 and within and all(t.is_contiguous() for t in (cache.lengths, *cache.keys, *cache.values))

    def loaded(self) -> list[int]:
        """The kinds (1: one token, 2: verify) whose package serves passes now."""
        return sorted(kind for kind, runner in self._runners.items() if runner is not None)

    def complete(self) -> bool:
        """Whether every kind asked for is served by its package."""
        return self.loaded() == sorted(self.settings)

    def kind_of(self, width: int) -> int:
        """The kind whose package serves passes of `width` new tokens (verify's, where no one-token kind is kept)."""
        return min(width, 2) if min(width, 2) in self.settings else 2

    def runner(self, width: int) -> Callable | None:
        kind = self.kind_of(width)
        if kind not in self._runners:
            self._runners[kind] = self._prepare(kind)
        return self._runners[kind]

    def path(self, kind: int) -> Path:
        return self.folder / f"{self._family(kind)}-{self._key(kind)}"

    def _family(self, kind: int) -> str:
        """The packages of one kind for these weights: a newer build (torch, settings, source) replaces the
        older one; another model's packages stay."""
        weights = hashlib.sha1(self.identity.encode()).hexdigest()[:12]
        return f"{'one-token' if kind == 1 else 'verify'}-{weights}"

    def _prepare(self, kind: int) -> Callable | None:
        path = self.path(kind)
        try:
            if not path.exists():
                self._build_missing()
            if kind in self._build_errors:
                raise self._build_errors.pop(kind)
            runner = _LoadedPackage(path)
            self._probe(runner, kind)
            return runner
        except Exception as error:  # an export, a C++ build or a stale package: torch.compile takes over
            self.failure = f"{path.name}: {first_line(error)[:200]}"
            return None

    def _build_missing(self) -> None:
        """Build every missing package at once, each written whole or not at all: each kind is exported
        here and compiled in a child process of its own (inductor's lowering and the C++ build run mostly
        on one core: side by side, the default target's two builds took 223.5 s against 330.0 s one after
        the other on 2 cores). A kind that fails keeps its error for `_prepare`; an interrupted build
        stops its children, and a killed one's children die with it (build_package), its scratch folder
        removed by a later build."""
        self.folder.mkdir(parents=True, exist_ok=True)
        for abandoned in self.folder.glob(f"{SCRATCH_PREFIX}*"):
            if time.time() - abandoned.stat().st_mtime > ABANDONED_AFTER_S:
                shutil.rmtree(abandoned, ignore_errors=True)
        with tempfile.TemporaryDirectory(dir=self.folder, prefix=SCRATCH_PREFIX) as scratch:  # removed after
            builds: dict[int, tuple[Path, subprocess.Popen]] = {}
            try:
                for kind in sorted(self.settings, reverse=True):  # the longer build (verify) starts first
                    if self.path(kind).exists():
                        continue
                    try:
                        work = Path(scratch) / str(kind)
                        builds[kind] = work, self._start_build(kind, work)
                    except Exception as error:
                        self._build_errors[kind] = error
                for kind, (work, child) in builds.items():
                    try:
                        self._finish_build(kind, work, child)
                    except Exception as error:
                        self._build_errors[kind] = error
            finally:
                for _, child in builds.values():
                    if child.poll() is None:
                        child.kill()
                        child.wait()

    def _start_build(self, kind: int, work: Path) -> subprocess.Popen:
        """Export the module at this kind's shapes into `work` and start compiling it (build_package)."""
        width = Dim("width", min=2, max=self.max_width) if kind == 2 else None
        capacity = CAPACITY_STEP * Dim("capacity_steps", min=1, max=MAX_CAPACITY_STEPS)
        layers = len(self.module.layers)
        shapes = {
            "ids": {1: width} if width else None,
            "lengths": None,
            "keys": [{2: capacity}] * layers,
            "values": [{2: capacity}] * layers,
            "offsets": {1: width} if width else None,
            "among": {1: width, 2: width} if width else None,
        }
        work.mkdir()
        with torch.no_grad():  # freezing needs no_grad (torch/_inductor/compile_fx.py)
            example = self._example(EXPORTED_WIDTH[kind])
            program = torch.export.export(self.module, example, dynamic_shapes=shapes)
        torch.export.save(program, work / PROGRAM)
        (work / SETTINGS).write_text(json.dumps(self.settings[kind]))
        root = str(Path(__file__).resolve().parents[2])  # the folder holding `backend`
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
        with open(work / LOG, "wb") as log:
            command = [sys.executable, "-m", __name__, str(work), str(os.getpid())]
            return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)

    def _finish_build(self, kind: int, work: Path, child: subprocess.Popen) -> None:
        """Wait for the child, then move its package, unpacked, to this kind's path."""
        if child.wait():
            said = [line for line in (work / LOG).read_text(errors="replace").splitlines() if line.strip()]
            raise RuntimeError(said[-1] if said else f"the package build exited with status {child.returncode}")
        path = self.path(kind)
        with zipfile.ZipFile(work / ARCHIVE) as package:  # kept unpacked: loading then extracts nothing
            package.extractall(work / "unpacked")
        os.replace(work / EXPECTED, work / "unpacked" / EXPECTED)
        try:
            os.replace(work / "unpacked", path)
        except OSError:  # another process finished the same package first
            if not path.is_dir():
                raise
        self.built.append(path.name)
        for stale in self.folder.glob(f"{self._family(kind)}-*"):
            if stale != path:
                shutil.rmtree(stale, ignore_errors=True)

    def _example(self, width: int) -> tuple:
        """Inputs of a pass of `width` new tokens after PROBE_LENGTH cached ones (random, so a probe reads)."""
        generator = torch.Generator().manual_seed(width)
        cache = self.new_cache(PROBE_CAPACITY, 1)
        for tensor in (*cache.keys, *cache.values):
            tensor.copy_(torch.randn(tensor.shape, generator=generator))
        cache.lengths.fill_(PROBE_LENGTH)
        vocabulary = self.module.embed.num_embeddings
        device = cache.lengths.device
        ids = torch.randint(0, vocabulary, (1, width), generator=generator).to(device)  # [1, T]
        return (ids, cache.lengths, cache.keys, cache.values, *Visibility.chains(1, width, device))

    def _probe(self, runner: Callable, kind: int) -> None:
        """Raise unless the package computes what it computed where it was built (its graph's own rounding,
        whatever the dtype), and what the eager module does within the dtype's rounding, cache writes
        included."""
        expected = torch.load(self.path(kind) / EXPECTED)
        mine, theirs = self._example(EXPORTED_WIDTH[kind]), self._example(EXPORTED_WIDTH[kind])
        with torch.no_grad():
            logits, hidden = runner(*mine)
            want_logits, want_hidden = self.module(*theirs)
        got = {"logits": logits, "hidden states": hidden, "cached keys": mine[2][0]}  # written in place
        built = {name: _gap(tensor, expected[name]) for name, tensor in got.items()}
        wanted = (want_logits, want_hidden, theirs[2][0])
        eager = {name: _gap(tensor, want) for (name, tensor), want in zip(got.items(), wanted, strict=True)}
        wrong = [f"{name} off by {gap:.2g} from its build" for name, gap in built.items() if not gap <= BUILT_TOLERANCE]
        tolerance = EAGER_TOLERANCE.get(hidden.dtype, EAGER_TOLERANCE[torch.float32])
        wrong += [f"{name} off by {gap:.2g} from eager" for name, gap in eager.items() if not gap <= tolerance]
        if wrong:
            raise RuntimeError(f"the package disagrees ({', '.join(wrong)})")

    def _key(self, kind: int) -> str:
        digest = hashlib.sha1(self._common_key.encode())
        digest.update(f"{kind} {sorted(self.settings[kind].items())}".encode())
        return digest.hexdigest()[:24]

    @cached_property
    def _common_key(self) -> str:
        """What both packages depend on besides their settings (hashed once: it reads every weight)."""
        parts = (
            self.identity,
            _other_tensors_digest(self.module),
            f"{self.max_width} {MAX_CAPACITY_STEPS} {CAPACITY_STEP}",
            torch.__version__,
            str(torch.version.git_version),
            _machine(),
            _source_digest(type(self.module)),
            _source_digest(PackagedGraphs),
            _source_digest(adjust_templates),  # the GEMM blockings inductor may pick
            _source_digest(attention_for),  # how its attention keeps rows width-invariant
        )
        return "\n".join(parts)


class _LoadedPackage:
    """A package's graph, called as the module it was exported from is (tensors and lists of tensors;
    here ids, lengths, keys, values, offsets, among -> logits, hidden), its inputs passed flat in the
    exported call spec's order. Loaded from the unpacked folder by AOTInductor's package loader, as
    torch._inductor.aoti_load_package does after extracting an archive to a temporary folder (which a
    killed process would leave behind, ~650 MB each)."""

    def __init__(self, folder: Path) -> None:
        self.loader = torch._C._aoti.AOTIModelPackageLoader(str(folder), "model", False, 1, -1)

    def __call__(self, *inputs: torch.Tensor | list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        flat = [tensor for item in inputs for tensor in (item if isinstance(item, list) else [item])]
        logits, hidden = self.loader.boxed_run(flat)
        return logits, hidden


def build_package(work: Path, parent: int) -> None:
    """A child process's part of a build: compile the exported program in `work` into a package there,
    with the kind's inductor settings, in a scratch inductor cache (nothing left in the shared one)."""
    from torch._inductor.utils import fresh_cache  # the compiler, which a loading start never imports

    _die_with(parent)
    adjust_templates()
    program = torch.export.load(work / PROGRAM)
    settings = json.loads((work / SETTINGS).read_text())
    (work / "cache").mkdir()
    with torch.no_grad(), fresh_cache(dir=str(work / "cache")):
        torch._inductor.aoti_compile_and_package(program, package_path=str(work / ARCHIVE), inductor_configs=settings)
        example = copy.deepcopy(program.example_inputs[0])  # the package writes the cache in place
        logits, hidden = torch._inductor.aoti_load_package(str(work / ARCHIVE))(*example)
    torch.save({"logits": logits, "hidden states": hidden, "cached keys": example[2][0]}, work / EXPECTED)


def _gap(tensor: torch.Tensor, want: torch.Tensor) -> float:
    """The largest difference, as a share of the largest value wanted (of 1 where that is smaller)."""
    return float((tensor.float() - want.float()).abs().max()) / float(want.float().abs().max().clamp(min=1.0))


def _die_with(parent: int) -> None:
    """Have the kernel kill this process when the one that started it dies (Linux's PR_SET_PDEATHSIG), so
    a worker stopped by a signal mid-build leaves no build compiling for minutes; exit at once if it is
    already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # not Linux: an orphaned build finishes into a folder nobody reads
        return
    if os.getppid() != parent:
        os._exit(1)


def _other_tensors_digest(module: nn.Module) -> str:
    """A hash of the parameters and buffers outside linear layers (norms, embedding, rotary frequencies):
    the caller's identity covers the linear weights (inductor_cache.linear_weights_digest)."""
    linear = {id(t) for m in module.modules() if isinstance(m, nn.Linear) for t in m.parameters(recurse=False)}
    named = (*module.named_parameters(), *module.named_buffers())
    return tensors_digest((name, tensor) for name, tensor in named if id(tensor) not in linear)


def _machine() -> str:
    """The CPU the C++ code was built for (inductor compiles for the build machine's instruction set)."""
    cpu = Path("/proc/cpuinfo")
    lines = cpu.read_text().splitlines() if cpu.exists() else []
    described = [line for line in lines if line.startswith(("model name", "flags"))][:2]
    return " ".join([platform.machine(), str(torch.backends.cpu.get_cpu_capability()), *described])


def _source_digest(defined: object) -> str:
    """A hash of the source file defining a class or function."""
    return hashlib.sha1(Path(inspect.getfile(defined)).read_bytes()).hexdigest()


if __name__ == "__main__":
    build_package(Path(sys.argv[1]), int(sys.argv[2]))
