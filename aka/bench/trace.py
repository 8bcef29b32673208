"""Read PyTorch profiler output into per-operator work: which operator call cost how much time.

Owns the two input formats of ``aka trace import`` and how time is attributed to operators:

- a Chrome trace, from ``torch.profiler.profile(record_shapes=True).export_chrome_trace(path)``
  (plain or gzipped JSON with ``traceEvents``). Every GPU activity (``cat`` ``kernel``,
  ``gpu_memcpy``, ``gpu_memset``) is linked to the host launch with the same ``correlation``
  (``cuda_runtime``/``cuda_driver``), then to the stack of ``cpu_op`` events that enclose the launch
  in time on the launching thread (without a launch, to the ``cpu_op`` named by its ``External
  id``). The outermost op of that stack whose name ``known_ops`` holds owns the time, else the
  outermost op. A trace with no GPU activity (a CPU-only profile) uses each op's *self* time (its
  duration minus its children's on the same thread) and attributes it the same way.
- the JSON of ``key_averages``, written by ``dump_key_averages`` (format in docs/trace-import.md):
  rows with no call stack, so each row keeps its own self time (device time when the profile has
  any, else CPU time).

Calls are grouped by (op name, input dims, input types, concrete scalar inputs). Reads JSON only:
it never imports torch (``dump_key_averages`` only reads the profiler object it is given) and
never runs problem code.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import sys
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from aka.core.errors import SpecError

__all__ = [
    "KEY_AVERAGES_FORMAT",
    "OpCall",
    "OpWork",
    "TimeBasis",
    "TraceFormat",
    "TraceProfile",
    "dump_key_averages",
    "read_trace",
]

TraceFormat = Literal["chrome_trace", "key_averages"]
#: ``gpu``: summed GPU activity time; ``cpu_self``: summed CPU self time (a CPU-only profile).
TimeBasis = Literal["gpu", "cpu_self"]
#: The ``format`` tag ``dump_key_averages`` writes.
KEY_AVERAGES_FORMAT = "aka.key_averages/1"

_CPU_OP_CATS = frozenset({"cpu_op", "operator"})
_LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
_GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_EXPECTED = (
    "expected a Chrome trace from torch.profiler's export_chrome_trace (an object with "
    "'traceEvents') or key_averages JSON from aka.bench.trace.dump_key_averages (rows with 'key')"
)
#: Profiler type strings -> short dtype names; anything else is kept as the profiler wrote it.
_DTYPES = {
    "c10::BFloat16": "bf16",
    "c10::Half": "fp16",
    "float": "fp32",
    "double": "fp64",
    "c10::Float8_e4m3fn": "fp8_e4m3fn",
    "c10::Float8_e4m3fnuz": "fp8_e4m3fnuz",
    "c10::Float8_e5m2": "fp8_e5m2",
    "int": "int32",
    "long int": "int64",
    "short int": "int16",
    "signed char": "int8",
    "unsigned char": "uint8",
    "bool": "bool",
}


@dataclass(frozen=True)
class OpCall:
    """One operator signature as the profiler recorded it (one entry per schema argument).

    Attributes:
        name: The op, e.g. ``aten::rms_norm`` or ``_C::silu_and_mul``.
        input_dims: Each argument's dims (``[]`` for scalars and absent optionals).
        input_types: Each argument's profiler type string (``c10::BFloat16``, ``Scalar``, ``""``).
        concrete: Each argument's recorded scalar value (None where not recorded or a tensor).
    """

    name: str
    input_dims: tuple[JsonValue, ...] = ()
    input_types: tuple[str, ...] = ()
    concrete: tuple[JsonValue, ...] = ()

    def dims(self, index: int) -> list[int] | None:
        """Return argument ``index``'s dims as ints, or None if absent, empty or not a tensor."""
        if index >= len(self.input_dims):
            return None
        dims = self.input_dims[index]
        if not isinstance(dims, list) or not dims or not all(isinstance(d, int) for d in dims):
            return None
        return [int(d) for d in dims if isinstance(d, int)]

    def dtype(self, index: int) -> str | None:
        """Return argument ``index``'s dtype (``bf16``, ``fp32``, ...), None when absent."""
        if index >= len(self.input_types) or not self.input_types[index]:
            return None
        raw = self.input_types[index]
        return _DTYPES.get(raw, raw)

    def value(self, index: int) -> JsonValue:
        """Return argument ``index``'s recorded scalar value, None when not recorded."""
        return self.concrete[index] if index < len(self.concrete) else None

    def group_key(self) -> tuple[str, str, tuple[str, ...], str]:
        """Return a hashable key: calls with equal keys are the same shape."""
        return (
            self.name,
            json.dumps(self.input_dims),
            self.input_types,
            json.dumps(self.concrete, default=str),
        )


@dataclass(frozen=True)
class OpWork:
    """The time attributed to one operator signature and how many calls made it."""

    call: OpCall
    time_us: float
    calls: int


@dataclass(frozen=True)
class TraceProfile:
    """What a profile says: the work per operator signature and the total it came from.

    Attributes:
        path: The file read.
        format: ``chrome_trace`` or ``key_averages``.
        basis: ``gpu`` (GPU activity time) or ``cpu_self`` (CPU self time, CPU-only profiles).
        total_us: All time of that basis in the profile, attributed or not.
        work: Grouped work, heaviest first; its times sum to ``total_us``.
    """

    path: Path
    format: TraceFormat
    basis: TimeBasis
    total_us: float
    work: tuple[OpWork, ...]


def read_trace(path: str | Path, known_ops: Collection[str] = ()) -> TraceProfile:
    """Read a Chrome trace or key_averages JSON and attribute its time to operator calls.

    Args:
        path: The file (``.json`` or gzipped JSON); the format is told from its content.
        known_ops: Op names that own the time of everything they enclose (the mapping's ops).

    Returns:
        The grouped work, heaviest first.

    Raises:
        SpecError: The file is unreadable, not JSON, of neither format, or holds no work.
    """
    p = Path(path)
    raw = _load_json(p)
    if isinstance(raw, dict) and isinstance(raw.get("traceEvents"), list):
        return _read_chrome(p, raw["traceEvents"], frozenset(known_ops))
    rows = raw.get("rows") if isinstance(raw, dict) else raw
    if isinstance(rows, list) and rows and all(isinstance(r, dict) and "key" in r for r in rows):
        return _read_key_averages(p, rows)
    raise SpecError(f"not a profile: {_EXPECTED}", file=str(p))


def _load_json(path: Path) -> Any:
    try:
        data = path.read_bytes()
    except OSError as err:
        raise SpecError(f"cannot read the trace: {err}; check the path", file=str(path)) from err
    try:
        if data[:2] == b"\x1f\x8b":
            data = gzip.decompress(data)
        return json.loads(data)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SpecError(f"not JSON ({err}); {_EXPECTED}", file=str(path)) from err


# --- Chrome trace -------------------------------------------------------------------------------


@dataclass
class _Op:
    """A ``cpu_op`` event on one thread, with its enclosing op (index in the thread's list)."""

    name: str
    ts: float
    end: float
    args: dict[str, Any]
    parent: int | None = None
    children_us: float = 0.0
    owner: int | None = None
    index: int = -1


@dataclass
class _Thread:
    """One host thread's ops sorted by start, for "which op encloses time t" queries."""

    ops: list[_Op] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)

    def nest(self) -> None:
        """Sort the ops and set each one's parent: the innermost op enclosing it."""
        self.ops.sort(key=lambda op: (op.ts, -(op.end - op.ts)))
        self.starts = [op.ts for op in self.ops]
        stack: list[int] = []
        for i, op in enumerate(self.ops):
            op.index = i
            while stack and self.ops[stack[-1]].end <= op.ts:
                stack.pop()
            if stack:
                op.parent = stack[-1]
                self.ops[stack[-1]].children_us += op.end - op.ts
            stack.append(i)

    def innermost(self, t: float) -> int | None:
        """Return the index of the innermost op enclosing time ``t``, None outside every op."""
        i: int | None = bisect.bisect_right(self.starts, t) - 1
        while i is not None and i >= 0:
            if self.ops[i].end >= t:
                return i
            i = self.ops[i].parent
        return None

    def owner(self, index: int, known: frozenset[str]) -> int:
        """Return the outermost known op enclosing op ``index`` (itself included), else the root."""
        op = self.ops[index]
        if op.owner is None:
            chain = [index]
            while (parent := self.ops[chain[-1]].parent) is not None:
                chain.append(parent)
            op.owner = next((i for i in reversed(chain) if self.ops[i].name in known), chain[-1])
        return op.owner


def _read_chrome(path: Path, events: list[Any], known: frozenset[str]) -> TraceProfile:
    threads: dict[tuple[Any, Any], _Thread] = {}
    by_external: dict[Any, tuple[tuple[Any, Any], _Op]] = {}
    launches: dict[Any, tuple[tuple[Any, Any], float]] = {}
    gpu: list[dict[str, Any]] = []
    for ev in events:
        if not isinstance(ev, dict) or ev.get("ph") != "X":
            continue
        cat = str(ev.get("cat", "")).lower()
        args = _args(ev)
        thread = (ev.get("pid"), ev.get("tid"))
        ts, dur = _number(ev.get("ts")), _number(ev.get("dur"))
        if cat in _GPU_CATS:
            gpu.append(ev)
        elif cat in _LAUNCH_CATS and args.get("correlation") is not None:
            launches[args["correlation"]] = (thread, ts)
        elif cat in _CPU_OP_CATS:
            op = _Op(str(ev.get("name", "")), ts, ts + dur, args)
            threads.setdefault(thread, _Thread()).ops.append(op)
            if args.get("External id") is not None:
                by_external[args["External id"]] = (thread, op)
    if not threads and not gpu:
        raise SpecError(
            "the trace holds no operator events (cat 'cpu_op') and no GPU kernels; record it "
            "with torch.profiler.profile(record_shapes=True) around the work to import",
            file=str(path),
        )
    for t in threads.values():
        t.nest()
    acc = _Accumulator()
    if gpu:
        for ev in gpu:
            _attribute_gpu(ev, threads, launches, by_external, known, acc)
        return acc.profile(path, "chrome_trace", "gpu")
    for key, t in threads.items():
        for i, op in enumerate(t.ops):
            owner = t.owner(i, known)
            acc.add(_call_of(t.ops[owner]), op.end - op.ts - op.children_us, (key, owner))
    return acc.profile(path, "chrome_trace", "cpu_self")


def _attribute_gpu(
    ev: dict[str, Any],
    threads: dict[tuple[Any, Any], _Thread],
    launches: dict[Any, tuple[tuple[Any, Any], float]],
    by_external: dict[Any, tuple[tuple[Any, Any], _Op]],
    known: frozenset[str],
    acc: _Accumulator,
) -> None:
    """Add one GPU activity's time to the op that launched it."""
    args = _args(ev)
    dur = _number(ev.get("dur"))
    inner: tuple[tuple[Any, Any], int] | None = None
    launch = launches.get(args.get("correlation")) if args.get("correlation") is not None else None
    if launch is not None and launch[0] in threads:
        index = threads[launch[0]].innermost(launch[1])
        inner = (launch[0], index) if index is not None else None
    elif args.get("External id") in by_external:
        thread, op = by_external[args["External id"]]
        inner = (thread, op.index)
    if inner is None:
        name = str(ev.get("name", "?"))
        acc.add(OpCall(f"[{ev.get('cat')} outside any cpu op] {name[:100]}"), dur, None)
        return
    t = threads[inner[0]]
    owner = t.owner(inner[1], known)
    acc.add(_call_of(t.ops[owner]), dur, (inner[0], owner))


def _args(ev: dict[str, Any]) -> dict[str, Any]:
    args = ev.get("args")
    return args if isinstance(args, dict) else {}


def _call_of(op: _Op) -> OpCall:
    dims = op.args.get("Input Dims")
    types = op.args.get("Input type")
    concrete = op.args.get("Concrete Inputs")
    return OpCall(
        op.name,
        tuple(dims) if isinstance(dims, list) else (),
        tuple(str(t) for t in types) if isinstance(types, list) else (),
        tuple(_parse_concrete(v) for v in concrete) if isinstance(concrete, list) else (),
    )


def _parse_concrete(value: Any) -> JsonValue:
    """Turn a recorded scalar (the trace writes strings: "", "True", "1e-06", "[256]") to JSON."""
    if not isinstance(value, str):
        return value if isinstance(value, int | float | bool | list | type(None)) else str(value)
    text = value.strip()
    if text == "":
        return None
    if text in ("True", "False"):
        return text == "True"
    try:
        parsed: JsonValue = json.loads(text)
    except json.JSONDecodeError:
        try:  # C++ prints floats as "0." or "1e-06."
            number = float(text)
        except ValueError:
            return text
        return number if math.isfinite(number) else text
    return parsed


def _number(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


class _Accumulator:
    """Sums time and distinct owning calls per operator signature."""

    def __init__(self) -> None:
        self._calls: dict[tuple[str, str, tuple[str, ...], str], OpCall] = {}
        self._time: dict[tuple[str, str, tuple[str, ...], str], float] = {}
        self._owners: dict[tuple[str, str, tuple[str, ...], str], set[Any]] = {}
        self._counts: dict[tuple[str, str, tuple[str, ...], str], int] = {}

    def add(self, call: OpCall, time_us: float, owner: Any, count: int = 0) -> None:
        key = call.group_key()
        self._calls.setdefault(key, call)
        self._time[key] = self._time.get(key, 0.0) + max(time_us, 0.0)
        if owner is not None:
            self._owners.setdefault(key, set()).add(owner)
        self._counts[key] = self._counts.get(key, 0) + count

    def profile(self, path: Path, fmt: TraceFormat, basis: TimeBasis) -> TraceProfile:
        work = [
            OpWork(call, self._time[k], len(self._owners.get(k, ())) + self._counts[k])
            for k, call in self._calls.items()
            if self._time[k] > 0
        ]
        work.sort(key=lambda w: -w.time_us)
        total = sum(w.time_us for w in work)
        if total <= 0:
            raise SpecError(
                "the profile records no time (every op and kernel lasts 0 us); profile real work",
                file=str(path),
            )
        return TraceProfile(path, fmt, basis, total, tuple(work))


# --- key_averages JSON --------------------------------------------------------------------------


class _KeyAveragesRow(BaseModel):
    """One row of the key_averages JSON (see docs/trace-import.md); unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(min_length=1)
    input_shapes: list[JsonValue] = Field(default_factory=list)
    input_types: list[str] | None = None
    concrete_inputs: list[JsonValue] | None = None
    count: int = Field(default=0, ge=0)
    self_cpu_time_total_us: float = Field(default=0.0, ge=0)
    cpu_time_total_us: float = Field(default=0.0, ge=0)
    device_time_total_us: float = Field(default=0.0, ge=0)
    self_device_time_total_us: float | None = Field(default=None, ge=0)
    device_type: str = "CPU"
    is_user_annotation: bool = False

    def device_us(self) -> float:
        """Device time owned by this row (self time when recorded, else the inclusive time)."""
        if self.self_device_time_total_us is not None:
            return self.self_device_time_total_us
        return self.device_time_total_us


def _read_key_averages(path: Path, raw_rows: list[Any]) -> TraceProfile:
    rows: list[_KeyAveragesRow] = []
    for i, raw in enumerate(raw_rows):
        try:
            rows.append(_KeyAveragesRow.model_validate(raw))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise SpecError(
                f"key_averages row {i}: {first['msg']}; see docs/trace-import.md for the format",
                file=str(path),
                field=f"rows.{i}.{where}",
            ) from err
    ops = [r for r in rows if r.device_type.upper() == "CPU" and not r.is_user_annotation]
    devices = [r for r in rows if r.device_type.upper() != "CPU" and not r.is_user_annotation]
    on_gpu = any(r.device_us() > 0 or r.device_time_total_us > 0 for r in rows)
    acc = _Accumulator()
    for r in ops:
        call = OpCall(
            r.key,
            tuple(r.input_shapes),
            tuple(r.input_types or ()),
            tuple(_parse_concrete(v) for v in r.concrete_inputs or ()),
        )
        acc.add(call, r.device_us() if on_gpu else r.self_cpu_time_total_us, None, r.count)
    if on_gpu and devices:
        # Kernel rows hold all GPU time; what no CPU row claims was launched outside any op.
        attributed = sum(r.device_us() for r in ops)
        rest = sum(r.device_us() for r in devices) - attributed
        if rest > 1e-6 * max(attributed, 1.0):
            acc.add(OpCall("[GPU time outside any cpu op]"), rest, None)
    return acc.profile(path, "key_averages", "gpu" if on_gpu else "cpu_self")


def dump_key_averages(prof: Any, path: str | Path) -> Path:
    """Write ``prof.key_averages(group_by_input_shape=True)`` as key_averages JSON.

    Each row also gets ``input_types`` and ``concrete_inputs`` when every event of the row agrees
    on them (they let the import check dtypes and read scalars such as ``eps`` or ``k``).

    Args:
        prof: A finished ``torch.profiler.profile`` run with ``record_shapes=True``.
        path: Where to write the JSON.

    Returns:
        The path written.
    """
    # No torch import here (reading a trace needs no torch): the profiler object brings it.
    torch_version = str(getattr(sys.modules.get("torch"), "__version__", "unknown"))
    detail: dict[tuple[str, str], tuple[list[str] | None, list[JsonValue] | None]] = {}
    for ev in prof.events():
        key = (ev.key, json.dumps(ev.input_shapes))
        types = getattr(ev, "input_dtypes", None)
        concrete = getattr(ev, "concrete_inputs", None)
        now = (
            [str(t) for t in types] if types is not None else None,
            [_json_scalar(v) for v in concrete] if concrete is not None else None,
        )
        seen = detail.setdefault(key, now)
        detail[key] = (
            seen[0] if seen[0] == now[0] else None,
            seen[1] if seen[1] == now[1] else None,
        )
    rows = [_row_of(avg, detail) for avg in prof.key_averages(group_by_input_shape=True)]
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    head = json.dumps({"format": KEY_AVERAGES_FORMAT, "torch_version": torch_version})
    lines = ",\n".join(json.dumps(row) for row in rows)  # one row per line: diffable, greppable
    out.write_text(f'{head[:-1]}, "rows": [\n{lines}\n]}}\n', encoding="utf-8")
    return out


def _row_of(
    avg: Any, detail: dict[tuple[str, str], tuple[list[str] | None, list[JsonValue] | None]]
) -> dict[str, JsonValue]:
    """One FunctionEventAvg as a JSON row (torch 2.11-2.13 attribute names)."""
    types, concrete = detail.get((avg.key, json.dumps(avg.input_shapes)), (None, None))
    device = getattr(avg, "device_type", None)
    row: dict[str, JsonValue] = {
        "key": avg.key,
        "input_shapes": _json_scalar(avg.input_shapes or []),
        "count": int(avg.count),
        "self_cpu_time_total_us": float(avg.self_cpu_time_total),
        "cpu_time_total_us": float(avg.cpu_time_total),
        "device_time_total_us": float(getattr(avg, "device_time_total", 0.0) or 0.0),
        "self_device_time_total_us": float(getattr(avg, "self_device_time_total", 0.0) or 0.0),
        "device_type": str(getattr(device, "name", device or "CPU")),
        "is_user_annotation": bool(getattr(avg, "is_user_annotation", False)),
    }
    if types is not None:
        row["input_types"] = list(types)
    if concrete is not None:
        row["concrete_inputs"] = concrete
    return row


def _json_scalar(value: Any) -> JsonValue:
    """Make a profiler value JSON-safe: lists recurse, numbers stay, the rest becomes text."""
    if isinstance(value, list | tuple):
        return [_json_scalar(v) for v in value]
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return str(value)
