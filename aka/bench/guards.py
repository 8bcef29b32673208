"""Inside a candidate worker: the runtime guards and the engagement evidence (ARCHITECTURE.md §4).

Runs only in scorer worker processes, around untrusted code. Installed *before* the candidate is
imported:

- a launch tracer: every launch of a ``@triton.jit`` function defined in the candidate's file
  (plain, autotuned or heuristics-wrapped; compiled or interpreted) is recorded with the memory of
  its tensor arguments; in a *ghost* call those launches are skipped, so the output shows what the
  candidate's kernels contributed;
- an op recorder (a ``TorchDispatchMode``): every aten op the forward runs outside the candidate's
  launches, classed as free (allocation, views, metadata) or library work (math, copies, casts);
- a tamper watch: fingerprints of the timers, the torch and Triton entry points the harness relies
  on and the reference's ``Model.forward``, plus a record of threads and processes the candidate's
  code starts.

Produces raw facts only (names, byte counts, address overlaps); the parent judges them
(``aka.bench.engagement``).
"""

from __future__ import annotations

import contextlib
import re
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CandidateGuard",
    "StorageSpan",
    "Trace",
    "cuda_global_names",
    "device_event_kind",
    "fingerprint",
    "output_problems",
    "overlapping",
    "readback_bytes",
    "spans_of",
]

#: aten ops that allocate, describe or view memory: they do no work on values.
_FREE_OPS = frozenset(
    {
        "empty",
        "empty_like",
        "empty_strided",
        "new_empty",
        "new_empty_strided",
        "zeros",
        "zeros_like",
        "new_zeros",
        "ones",
        "ones_like",
        "new_ones",
        "full",
        "full_like",
        "new_full",
        "zero_",
        "fill_",
        "detach",
        "alias",
        "lift_fresh",
        "set_",
        "resize_",
        "_local_scalar_dense",
        "sym_size",
        "sym_stride",
        "sym_numel",
        "sym_storage_offset",
        "is_same_size",
        "_has_compatible_shallow_copy_type",
        "record_stream",
    }
)
#: Device work that only initialises memory (``torch.zeros``/``fill_``/``zero_``, memsets): the
#: profiler counts it as neither the candidate's nor library compute, as the op recorder does.
_GLUE_KERNEL = re.compile(r"FillFunctor|^Memset|memset", re.IGNORECASE)
#: A copy from the device to the host (``.item()`` of a length the output's shape needs). It cannot
#: write a device output, and an answer the host computes must come back by a host-to-device copy,
#: which stays library work. Only a small readback is set apart from library work
#: (``READBACK_FREE_BYTES``, judged in ``aka.bench.engagement``): as library work, one 4-byte read
#: was 26-38% of the device time of moe_align_block_size_cuda on the H200 and failed a fast honest
#: kernel, while reading a whole input back would let the host do the reduction unseen.
_READBACK = re.compile(r"^Memcpy DtoH")
#: ``__global__`` functions in CUDA C++ sources handed to ``load_inline``: qualifiers, the return
#: type and ``__launch_bounds__(...)`` may stand between the keyword and the name.
_GLOBAL_FN = re.compile(
    r"__global__\s+(?:(?:__launch_bounds__\s*\([^)]*\)|[\w:<>]+)\s+)*?"
    r"(?!__launch_bounds__\b)(\w+)\s*\("
)


def cuda_global_names(source: str) -> set[str]:
    """The names of the ``__global__`` functions (kernels) that CUDA C++ ``source`` defines."""
    return set(_GLOBAL_FN.findall(source))


@dataclass(frozen=True)
class StorageSpan:
    """The memory a tensor's storage covers: ``[start, end)``."""

    start: int
    end: int

    def overlaps(self, other: StorageSpan) -> bool:
        """Whether the two spans share a byte."""
        return self.start < other.end and other.start < self.end


def spans_of(tensors: Any) -> list[StorageSpan]:
    """Storage spans of the tensors in ``tensors`` (an iterable; non-tensors are skipped)."""
    import torch

    spans = []
    for t in tensors:
        if not isinstance(t, torch.Tensor) or t.device.type == "meta":
            continue
        try:
            storage = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            continue
        start, size = storage.data_ptr(), storage.nbytes()
        if start and size:
            spans.append(StorageSpan(start, start + size))
    return spans


def overlapping(named: dict[str, Any], against: list[StorageSpan]) -> list[str]:
    """Names of tensors in ``named`` whose storage overlaps any span of ``against``."""
    return sorted(
        name
        for name, t in named.items()
        if any(s.overlaps(a) for s in spans_of([t]) for a in against)
    )


def output_problems(tensors: dict[str, Any]) -> list[str]:
    """Why outputs are not plain tensors with real storage (empty list when they are)."""
    import torch

    problems = []
    for key, t in tensors.items():
        if type(t) is not torch.Tensor:
            problems.append(f"output {key!r} is a {type(t).__name__}, not a plain torch.Tensor")
        elif t.layout is not torch.strided:
            problems.append(f"output {key!r} has layout {t.layout}, not strided")
        elif t.device.type == "meta":
            problems.append(f"output {key!r} is a meta tensor (no values)")
        elif t.numel() and not spans_of([t]):
            problems.append(f"output {key!r} has no storage behind it")
    return problems


@dataclass
class Trace:
    """What one traced forward call did: candidate launches and library ops."""

    launches: list[dict[str, Any]] = field(default_factory=list)
    launch_spans: list[StorageSpan] = field(default_factory=list)
    own_bytes: int = 0
    library_ops: dict[str, int] = field(default_factory=dict)
    library_bytes: int = 0
    readback_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        """The facts the parent needs (no addresses)."""
        top = sorted(self.library_ops.items(), key=lambda kv: -kv[1])[:8]
        return {
            "launches": len(self.launches),
            "kernels": sorted({str(launch["name"]) for launch in self.launches}),
            "own_bytes": self.own_bytes,
            "library_bytes": self.library_bytes,
            "library_ops": dict(top),
            "readback_bytes": self.readback_bytes,
        }


def _tensor_bytes(obj: Any) -> int:
    import torch

    if isinstance(obj, torch.Tensor):
        return int(obj.numel() * obj.element_size())
    if isinstance(obj, list | tuple):
        return sum(_tensor_bytes(o) for o in obj)
    return 0


def _on_device(obj: Any) -> bool:
    device = getattr(obj, "device", None)
    return device is not None and getattr(device, "type", "cpu") != "cpu"


def readback_bytes(name: str, args: Any, kwargs: dict[str, Any], out: Any) -> int:
    """Bytes one aten op moved from a device to the host (0 for any other op).

    ``.item()`` is ``_local_scalar_dense`` of a device tensor; ``.cpu()``, ``.to("cpu")``,
    ``.tolist()`` and ``cpu_tensor.copy_(device_tensor)`` give a host tensor from a device one.
    """
    import torch

    inputs = [*args, *kwargs.values()]
    if name == "_local_scalar_dense":
        return sum(
            t.element_size() for t in inputs if isinstance(t, torch.Tensor) and _on_device(t)
        )
    outs = out if isinstance(out, list | tuple) else [out]
    host = [t for t in outs if isinstance(t, torch.Tensor) and t.device.type == "cpu"]
    if host and any(isinstance(t, torch.Tensor) and _on_device(t) for t in inputs):
        return sum(_tensor_bytes(t) for t in host)
    return 0


def _in_stdlib(filename: str, stdlib: str) -> bool:
    return filename.startswith(stdlib) and not any(
        part in filename for part in ("site-packages", "dist-packages")
    )


def _op_name(func: Any) -> str:
    name = str(getattr(func, "__name__", func))  # e.g. "add.Tensor"
    return name.split(".")[0]


def fingerprint(obj: Any) -> str:
    """Identity of a function or object: replacing it (or its code) changes the value."""
    obj = getattr(obj, "__func__", obj)  # a bound method is a new object on every access
    code = getattr(obj, "__code__", None)
    return f"{id(obj)}:{id(code)}:{hash(code.co_code) if code is not None else ''}"


def _resolve(path: str) -> Any:
    """Look up a dotted path such as ``torch.cuda.Event.record`` (None when absent)."""
    head, *rest = path.split(".")
    obj: Any = sys.modules.get(head)
    for part in rest:
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


#: What a candidate must never replace: timers, the harness's torch/Triton entry points.
_WATCHED = (
    "time.perf_counter",
    "time.perf_counter_ns",
    "time.time",
    "time.monotonic",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.Event.query",
    "torch.cuda.synchronize",
    "torch.cuda.current_stream",
    "torch.allclose",
    "torch.equal",
    "torch.save",
    "torch.load",
    "torch.Tensor.__eq__",
    "torch.Tensor.clone",
    "torch.Tensor.copy_",
    "torch.Tensor.to",
    "torch.Tensor.detach",
    "torch.nn.Module.__call__",
    "torch.nn.Module._call_impl",
    "torch.testing.assert_close",
    "triton.testing.do_bench",
    "triton.runtime.jit.JITFunction.run",
    "triton.runtime.jit.KernelInterface.__getitem__",
    "triton.runtime.autotuner.Autotuner.run",
    "triton.runtime.interpreter.InterpretedFunction.run",
    "threading.Thread.start",
    "aka.hardware.timer.sample_windows",
)


class CandidateGuard:
    """The worker's watch over one candidate file.

    Args:
        candidate_path: The candidate's file (launches of kernels defined there are its own).
        reference: The problem's reference module (its ``Model.forward`` is fingerprinted).
    """

    def __init__(self, candidate_path: str, reference: Any) -> None:
        self.candidate_path = candidate_path
        self.reference = reference
        self._trace: Trace | None = None
        self._depth = 0
        self.ghost = False
        self.cuda_kernel_names: set[str] = set()
        self.started: list[str] = []
        self._fingerprints: dict[str, str] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        """Patch the launch path and the thread/process starters; take the fingerprints."""
        self._patch_launchers()
        self._patch_starters()
        self._patch_load_inline()
        self._fingerprints = self._take()

    def _is_own(self, kernel: Any) -> bool:
        fn: Any = kernel
        for _ in range(8):  # Autotuner -> Heuristics -> JITFunction -> python function
            inner = getattr(fn, "fn", None)
            if inner is None or inner is fn:
                break
            fn = inner
        code = getattr(fn, "__code__", None)
        return code is not None and code.co_filename == self.candidate_path

    def _patch_launchers(self) -> None:
        classes: list[Any] = []
        with contextlib.suppress(ImportError):
            from triton.runtime.jit import JITFunction

            classes.append(JITFunction)
        with contextlib.suppress(ImportError):
            from triton.runtime.autotuner import Autotuner, Heuristics

            classes += [Autotuner, Heuristics]
        with contextlib.suppress(ImportError):
            from triton.runtime.interpreter import InterpretedFunction

            classes.append(InterpretedFunction)
        for cls in classes:
            original = cls.__dict__.get("run")
            if original is None:
                continue
            cls.run = self._wrap_run(original)

    def _wrap_run(self, original: Callable[..., Any]) -> Callable[..., Any]:
        guard = self

        def run(kernel: Any, *args: Any, **kwargs: Any) -> Any:
            if guard._trace is None and not guard.ghost:  # timing: no detour on the launch path
                return original(kernel, *args, **kwargs)
            if not guard._is_own(kernel):
                return original(kernel, *args, **kwargs)
            outer = guard._depth == 0
            if outer and not kwargs.get("warmup", False):
                guard._record_launch(kernel, args, kwargs)
            if guard.ghost:
                return None
            guard._depth += 1
            try:
                return original(kernel, *args, **kwargs)
            finally:
                guard._depth -= 1

        run.__wrapped__ = original  # type: ignore[attr-defined]
        return run

    def _record_launch(self, kernel: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        trace = self._trace
        if trace is None:
            return
        values = [*args, *kwargs.values()]
        fn = kernel
        while getattr(fn, "fn", None) is not None and getattr(fn, "fn", None) is not fn:
            fn = fn.fn
        trace.launches.append({"name": getattr(fn, "__name__", "?")})
        trace.launch_spans += spans_of(values)
        trace.own_bytes += sum(_tensor_bytes(v) for v in values)

    def _patch_starters(self) -> None:
        import _thread
        import os
        import subprocess

        guard = self
        path = self.candidate_path

        stdlib = sysconfig.get_paths()["stdlib"]

        def from_candidate() -> bool:
            # The first caller outside the standard library (threading, concurrent.futures,
            # subprocess...) decides: the candidate's file, or a library such as Triton.
            frame: Any = sys._getframe(2)
            while frame is not None and _in_stdlib(frame.f_code.co_filename, stdlib):
                frame = frame.f_back
            return frame is not None and frame.f_code.co_filename == path

        def watch(owner: Any, attr: str, what: str) -> None:
            original = getattr(owner, attr)

            def started(*args: Any, **kwargs: Any) -> Any:
                if from_candidate():
                    with guard._lock:
                        guard.started.append(what)
                return original(*args, **kwargs)

            started.__wrapped__ = original  # type: ignore[attr-defined]
            setattr(owner, attr, started)

        watch(threading.Thread, "start", "a thread")
        watch(_thread, "start_new_thread", "a thread")
        watch(os, "fork", "a process (fork)")
        watch(subprocess.Popen, "__init__", "a process (subprocess)")
        for name in ("posix_spawn", "posix_spawnp", "system"):
            if hasattr(os, name):
                watch(os, name, f"a process ({name})")

    def _patch_load_inline(self) -> None:
        """Learn the ``__global__`` kernel names of the candidate's CUDA C++ extensions."""
        try:
            import torch.utils.cpp_extension as ext
        except ImportError:  # pragma: no cover - torch always has it
            return
        original = ext.load_inline
        guard = self

        def load_inline(*args: Any, **kwargs: Any) -> Any:
            sources = kwargs.get("cuda_sources", args[2] if len(args) > 2 else None)
            texts = [sources] if isinstance(sources, str) else list(sources or [])
            for text in texts:
                guard.cuda_kernel_names.update(cuda_global_names(str(text)))
            return original(*args, **kwargs)  # type: ignore[no-untyped-call]

        ext.load_inline = load_inline

    # ------------------------------------------------------------------ tamper watch
    def _take(self) -> dict[str, str]:
        watched = {p: _resolve(p) for p in _WATCHED}
        model = getattr(self.reference, "Model", None)
        watched["reference.Model.forward"] = getattr(model, "forward", None)
        return {k: fingerprint(v) for k, v in watched.items() if v is not None}

    def tampering(self) -> list[str]:
        """What the candidate changed or started since ``install`` (empty when nothing)."""
        now = self._take()
        changed = sorted(k for k, v in self._fingerprints.items() if now.get(k) != v)
        found = [f"replaced {', '.join(changed)}"] if changed else []
        if self.started:
            found.append(f"started {', '.join(sorted(set(self.started)))}")
        return found

    # ------------------------------------------------------------------ tracing
    @contextlib.contextmanager
    def tracing(self, trace: Trace) -> Iterator[Trace]:
        """Record into ``trace`` the launches and library ops of the code run inside the block."""
        from torch.utils._python_dispatch import TorchDispatchMode

        guard = self

        class _Recorder(TorchDispatchMode):  # type: ignore[no-untyped-call]
            def __torch_dispatch__(
                self, func: Any, types: Any, args: Any = (), kwargs: Any = None
            ) -> Any:
                kwargs = kwargs or {}
                out = func(*args, **kwargs)
                if guard._depth == 0:
                    name = _op_name(func)
                    trace.readback_bytes += readback_bytes(name, args, kwargs, out)
                    if not (getattr(func, "is_view", False) or name in _FREE_OPS):
                        size = (
                            sum(_tensor_bytes(a) for a in args)
                            + sum(_tensor_bytes(v) for v in kwargs.values())
                            + _tensor_bytes(out)
                        )
                        trace.library_ops[name] = trace.library_ops.get(name, 0) + size
                        trace.library_bytes += size
                return out

        self._trace = trace
        try:
            with _Recorder():  # type: ignore[no-untyped-call]
                yield trace
        finally:
            self._trace = None

    @contextlib.contextmanager
    def ghosted(self) -> Iterator[None]:
        """Skip every launch of the candidate's own kernels inside the block."""
        self.ghost = True
        try:
            yield
        finally:
            self.ghost = False


def profile_device_time(call: Callable[[], Any], own_names: set[str]) -> dict[str, Any]:
    """Attribute the device time of ``call`` to the candidate's kernels or to library ones (GPU).

    Args:
        call: One forward call (already warm: compiled and autotuned).
        own_names: Names of the candidate's kernels (Triton function names, CUDA ``__global__``
            names).

    Returns:
        ``own_us``, ``library_us``, ``glue_us`` (fills, memsets), ``readback_us`` (device-to-host
        copies) and the top library kernels.
    """
    import torch
    from torch._C._autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        call()
        torch.cuda.synchronize()
    own, library = 0.0, 0.0
    names: dict[str, float] = {}
    pattern = (
        re.compile(r"(?<![\w])(" + "|".join(map(re.escape, sorted(own_names))) + r")(?![\w])")
        if own_names
        else None
    )
    glue, readback = 0.0, 0.0
    for event in prof.events():
        if getattr(event, "device_type", None) != DeviceType.CUDA:
            continue
        us = float(event.time_range.elapsed_us())
        kind = device_event_kind(event.name, pattern)
        if kind == "own":
            own += us
        elif kind == "glue":
            glue += us  # zero-filling a buffer the candidate allocated: allocation, not compute
        elif kind == "readback":
            readback += us
        else:
            library += us
            names[event.name[:120]] = names.get(event.name[:120], 0.0) + us
    top = dict(sorted(names.items(), key=lambda kv: -kv[1])[:8])
    return {
        "own_us": own,
        "library_us": library,
        "glue_us": glue,
        "readback_us": readback,
        "library_kernels": top,
    }


def device_event_kind(name: str, own: re.Pattern[str] | None) -> str:
    """Class one profiled device event: ``own``, ``glue``, ``readback`` or ``library``."""
    if own is not None and own.search(name):
        return "own"
    if _GLUE_KERNEL.search(name):
        return "glue"
    if _READBACK.search(name):
        return "readback"
    return "library"
