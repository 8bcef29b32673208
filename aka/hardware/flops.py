"""Count the FLOPs (per compute unit) and bytes of one PyTorch forward, under a dispatch mode.

Owns the counting machinery behind ``aka.hardware.roofline.count_costs``: a ``TorchDispatchMode``
that sees every aten op, prices matmul-class ops with torch's own flop formulas
(``torch.utils.flop_counter.flop_registry``, the formulas ``FlopCounterMode`` uses) at the tensor
unit of their operand dtype, prices everything else with the per-element tables below at
``vector_fp32``, and records which bytes of the inputs, parameters and buffers are read.

Imports torch at module level: only ``count_costs`` imports this module, inside a scorer worker.
It runs problem code, so it must never run in the parent process.

Byte model: an ideal fused kernel reads each byte of the inputs, parameters and buffers it uses
once and writes each output byte once; intermediates cost nothing. A tensor counts as read when a
non-view op takes it (or a view of it) as an argument; the bytes are the span it covers in its
storage, merged per storage, so a tensor passed twice, or a weight used by two ops, counts once,
and a slice of a cache buffer counts only the slice. A gather (embedding, index_select, gather,
advanced indexing) is charged the elements it returns, not its whole table. Bytes written are the
outputs' spans plus spans of inputs the forward updates in place.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from aka.hardware.roofline import CostCounts
from aka.spec.vocab import ComputeUnit

__all__ = ["count_forward_costs"]

_StorageKey = tuple[str, int]


def _words(text: str) -> list[str]:
    return text.split()


# Ops that move, view, cast, index or allocate data: 0 FLOPs (their bytes are what matters).
_FREE_OPS = frozenset(
    _words(
        "_to_copy _unsafe_view _reshape_alias alias as_strided cat clone constant_pad_nd "
        "contiguous copy detach diagonal embedding empty empty_like empty_strided expand fill "
        "flip full full_like gather index index_copy index_put index_select lift_fresh "
        "lift_fresh_copy masked_select narrow new_empty new_empty_strided new_full new_ones "
        "new_zeros ones ones_like pad permute repeat repeat_interleave reshape roll scalar_tensor "
        "scatter select slice slice_scatter select_scatter split split_with_sizes squeeze stack t "
        "transpose tril triu unbind unfold unsqueeze view view_as_complex view_as_real zero zeros "
        "zeros_like arange "
        "_local_scalar_dense set resize as_strided_scatter"
    )
)

# Elementwise ops, FLOPs per OUTPUT element. Arithmetic, compares and selects are 1. A
# transcendental is one special-function instruction plus range reduction, ~4; composites add
# their parts: sigmoid = exp + add + div = 6, silu = sigmoid + mul = 7, gelu (erf form) ~8,
# softplus = exp + log1p + compare ~9, mish = softplus + tanh + mul ~16.
_ELEMENTWISE_FLOPS: dict[str, float] = {
    **dict.fromkeys(
        _words(
            "abs add bitwise_and bitwise_not bitwise_or bitwise_xor ceil clamp clamp_max clamp_min "
            "copysign div eq floor fmod frac ge gt hardtanh isfinite isinf isnan le logical_and "
            "logical_not logical_or logical_xor lt masked_fill maximum minimum mul nan_to_num ne "
            "neg reciprocal relu remainder round rsub sign sub threshold trunc where"
        ),
        1.0,
    ),
    **dict.fromkeys(_words("addcdiv addcmul hardsigmoid leaky_relu lerp"), 2.0),
    "hardswish": 3.0,
    **dict.fromkeys(
        _words(
            "acos asin atan atan2 cos cosh exp exp2 expm1 log log10 log1p log2 rsqrt sin sinh "
            "sqrt tan"
        ),
        4.0,
    ),
    **dict.fromkeys(_words("celu elu erf erfc logit selu sigmoid tanh"), 6.0),
    **dict.fromkeys(_words("glu silu"), 7.0),
    **dict.fromkeys(_words("gelu erfinv"), 8.0),
    "softplus": 9.0,
    "mish": 16.0,
}

# Reductions and normalizations, FLOPs per INPUT element: sum/max-like 1; norm (square + add) 2;
# var/std (sub, square, add) 3; rms_norm (square-add, scale, weight) 4; logsumexp (max, sub, exp,
# add) 7; softmax/log_softmax (max, sub, exp, sum, scale) 8; layer/group/batch norm (mean, var,
# normalize, affine) 8.
_REDUCTION_FLOPS: dict[str, float] = {
    **dict.fromkeys(
        _words(
            "all amax amin aminmax any argmax argmin count_nonzero cumprod cumsum max mean min "
            "nansum prod sum"
        ),
        1.0,
    ),
    **dict.fromkeys(_words("linalg_vector_norm norm"), 2.0),
    **dict.fromkeys(_words("std std_mean var var_mean"), 3.0),
    **dict.fromkeys(_words("_fused_rms_norm rms_norm"), 4.0),
    "logsumexp": 7.0,
    **dict.fromkeys(_words("_log_softmax _softmax log_softmax softmax"), 8.0),
    **dict.fromkeys(
        _words(
            "_native_batch_norm_legit _native_batch_norm_legit_no_training batch_norm group_norm "
            "layer_norm native_batch_norm native_group_norm native_layer_norm"
        ),
        8.0,
    ),
}

# Ops that read only some elements of their first argument (a table): they are charged the
# elements they return, not the whole table.
_GATHER_OPS = frozenset(_words("embedding index_select gather index"))

# Ops that overwrite their mutated argument without reading it.
_OVERWRITE_OPS = frozenset(_words("copy fill zero index_put index_copy scatter masked_fill"))

# CPU's fused attention, which torch's registry lacks (counted with the CUDA op's formula).
_CPU_ATTENTION_OP = "_scaled_dot_product_flash_attention_for_cpu"

_FP8_DTYPES = frozenset(
    getattr(torch, name)
    for name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, name)
)
# The operand whose dtype picks the unit (addmm/baddbmm take the bias first).
_OPERAND_INDEX = {"addmm": 1, "baddbmm": 1}


def count_forward_costs(
    model: torch.nn.Module, inputs: Mapping[str, object] | Sequence[object], *, allow_tf32: bool
) -> CostCounts:
    """Run ``model`` forward once under the counting mode and return its costs.

    Args:
        model: The reference ``Model`` (any device).
        inputs: Keyword inputs (a mapping) or positional inputs (a sequence) for ``forward``.
        allow_tf32: Price fp32 matmuls at ``tc_tf32`` instead of ``fp32_matmul``.

    Returns:
        FLOPs per unit, unique bytes read and written, and notes on what was approximated.
    """
    input_tensors = _tensors(list(inputs.values()) if isinstance(inputs, Mapping) else inputs)
    owned = {
        key
        for t in [*input_tensors, *model.parameters(), *model.buffers()]
        if (key := _storage_key(t)) is not None
    }
    mode = _CostMode(owned=owned, allow_tf32=allow_tf32)
    with torch.no_grad(), mode:
        out = model(**inputs) if isinstance(inputs, Mapping) else model(*inputs)
    for t in _tensors(out):
        mode.writes.add(t)
    return CostCounts(
        flops_by_unit={u: f for u, f in mode.flops.items() if f > 0},
        bytes_read=float(mode.reads.total_bytes()),
        bytes_written=float(mode.writes.total_bytes()),
        notes=list(mode.notes),
    )


class _ByteSpans:
    """Byte ranges touched per storage; overlaps are merged so each byte counts once."""

    def __init__(self) -> None:
        self._spans: dict[_StorageKey, list[tuple[int, int]]] = defaultdict(list)
        self._loose_bytes = 0  # gathered rows: an amount, not a range, so never merged

    def add(self, t: torch.Tensor) -> None:
        key = _storage_key(t)
        if key is not None and t.numel() > 0:
            self._spans[key].append(_span(t))

    def add_bytes(self, n_bytes: int) -> None:
        self._loose_bytes += n_bytes

    def total_bytes(self) -> int:
        total = self._loose_bytes
        for spans in self._spans.values():
            end = -1
            for lo, hi in sorted(spans):
                total += max(0, hi - max(lo, end))
                end = max(end, hi)
        return total


class _CostMode(TorchDispatchMode):
    """Sees every aten op of the forward; accumulates FLOPs per unit and bytes touched."""

    def __init__(self, *, owned: set[_StorageKey], allow_tf32: bool) -> None:
        super().__init__()
        self.owned = owned
        self.allow_tf32 = allow_tf32
        self.flops: dict[ComputeUnit, float] = defaultdict(float)
        self.reads = _ByteSpans()
        self.writes = _ByteSpans()
        self.notes: dict[str, None] = {}  # ordered set

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        bound = _bind(func, args, kwargs)
        self._count_flops(func, bound, args, kwargs, out)
        if not _is_view(func):
            self._track_bytes(_op_name(func), bound, out)
        return out

    def note(self, text: str) -> None:
        self.notes[text] = None

    def _count_flops(
        self, func: Any, bound: list[tuple[Any, object]], args: Any, kwargs: Any, out: object
    ) -> None:
        name = _op_name(func)
        if func.overloadpacket in flop_registry or name == _CPU_ATTENTION_OP:
            self._count_matmul(func, name, bound, args, kwargs, out)
        elif name in _FREE_OPS:
            return
        elif name in _ELEMENTWISE_FLOPS:
            self.flops[ComputeUnit.VECTOR_FP32] += _ELEMENTWISE_FLOPS[name] * _first_numel(out)
        elif name == "pow":
            self.flops[ComputeUnit.VECTOR_FP32] += _pow_flops(args) * _first_numel(out)
        elif name in _REDUCTION_FLOPS:
            self.flops[ComputeUnit.VECTOR_FP32] += _REDUCTION_FLOPS[name] * _first_numel(args)
        else:
            self.note(f"unpriced op aten.{name}: counted 0 FLOPs")

    def _count_matmul(
        self,
        func: Any,
        name: str,
        bound: list[tuple[Any, object]],
        args: Any,
        kwargs: Any,
        out: Any,
    ) -> None:
        named = {arg.name: value for arg, value in bound}
        formula = flop_registry[
            torch.ops.aten._scaled_dot_product_flash_attention
            if name == _CPU_ATTENTION_OP
            else func.overloadpacket
        ]
        try:
            if name == _CPU_ATTENTION_OP:
                flops = float(formula(named["query"], named["key"], named["value"], out_val=out))
            else:
                flops = float(formula(*args, **kwargs, out_val=out))
        except (AssertionError, IndexError, KeyError, TypeError, ValueError) as err:
            self.note(f"aten.{name}: torch's flop formula failed ({err}); counted 0 FLOPs")
            return
        if named.get("is_causal") is True and name.startswith("_scaled_dot_product"):
            flops *= _causal_fraction(_tensors(named["query"])[0], _tensors(named["key"])[0])
            self.note(f"aten.{name} is causal: FLOPs scaled to the unmasked share")
        if "attention" in name:
            self.note("attention FLOPs count its two matmuls only (the FlashAttention convention)")
        operand = _tensors(args)[_OPERAND_INDEX.get(name, 0)]
        self.flops[self._unit_for(operand.dtype, name)] += flops

    def _unit_for(self, dtype: torch.dtype, name: str) -> ComputeUnit:
        if dtype == torch.bfloat16:
            return ComputeUnit.TC_BF16
        if dtype == torch.float16:
            return ComputeUnit.TC_FP16
        if dtype in _FP8_DTYPES:
            return ComputeUnit.TC_FP8
        if dtype == torch.float32:
            return ComputeUnit.TC_TF32 if self.allow_tf32 else ComputeUnit.FP32_MATMUL
        if dtype in (torch.int8, torch.uint8):
            self.note(f"aten.{name} on {dtype}: priced at the fp8 tensor rate (same on sm_89+)")
            return ComputeUnit.TC_FP8
        self.note(f"aten.{name} on {dtype}: no unit of its own, priced at fp32_matmul")
        return ComputeUnit.FP32_MATMUL

    def _track_bytes(self, name: str, bound: list[tuple[Any, object]], out: object) -> None:
        for position, (arg, value) in enumerate(bound):
            written = arg.alias_info is not None and arg.alias_info.is_write
            if position == 0 and name in _GATHER_OPS and isinstance(value, torch.Tensor):
                if _storage_key(value) in self.owned:
                    self._track_gather(name, value, out)
                continue
            for t in _tensors(value):
                if _storage_key(t) not in self.owned:
                    continue
                if written:
                    self.writes.add(t)
                if not written or name not in _OVERWRITE_OPS:
                    self.reads.add(t)

    def _track_gather(self, name: str, source: torch.Tensor, out: object) -> None:
        """Charge a gather the elements it returns, capped by the size of its source."""
        lo, hi = _span(source)
        self.reads.add_bytes(min(_first_numel(out) * source.element_size(), hi - lo))
        self.note(f"aten.{name}: counted the gathered elements of its source, not the whole source")


def _op_name(func: Any) -> str:
    """Return the aten packet name without the in-place suffix: ``add_`` -> ``add``."""
    name = str(func.overloadpacket.__name__)
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _is_view(func: Any) -> bool:
    is_view = getattr(func, "is_view", None)
    if is_view is not None:
        return bool(is_view)
    return any(r.alias_info is not None and not r.alias_info.is_write for r in func._schema.returns)


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[tuple[Any, object]]:
    """Pair each given argument with its schema entry (positional in order, then keywords)."""
    schema_args = list(func._schema.arguments)
    by_name = {a.name: a for a in schema_args}
    pairs: list[tuple[Any, object]] = list(zip(schema_args, args, strict=False))
    pairs += [(by_name[k], v) for k, v in kwargs.items() if k in by_name]
    return pairs


def _tensors(value: object) -> list[torch.Tensor]:
    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


def _first_numel(value: object) -> int:
    found = _tensors(value)
    return found[0].numel() if found else 0


def _storage_key(t: torch.Tensor) -> _StorageKey | None:
    """Identify the storage under ``t``; None for tensors without real memory (meta, empty)."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return (str(t.device), ptr) if ptr else None


def _span(t: torch.Tensor) -> tuple[int, int]:
    """Byte range ``t`` covers in its storage (first to one past the last element)."""
    itemsize = t.element_size()
    extent = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride(), strict=True))
    start = int(t.storage_offset()) * itemsize
    return start, start + int(extent) * itemsize


def _pow_flops(args: tuple[Any, ...]) -> float:
    """x**2 is a multiply, x**3 two, x**0.5 a sqrt; any other exponent is exp(log(x) * y) ~ 9."""
    exponent = args[1] if len(args) > 1 else None
    if isinstance(exponent, int | float) and not isinstance(exponent, bool):
        return {1: 0.0, 2: 1.0, 3: 2.0, -1: 1.0, 0.5: 4.0, -0.5: 4.0}.get(exponent, 9.0)
    return 9.0


def _causal_fraction(query: torch.Tensor, key: torch.Tensor) -> float:
    """Share of (query, key) pairs a top-left causal mask keeps (torch's ``is_causal``)."""
    s_q, s_k = query.shape[-2], key.shape[-2]
    kept = s_q * (s_q + 1) / 2 if s_q <= s_k else s_k * (s_k + 1) / 2 + (s_q - s_k) * s_k
    return kept / (s_q * s_k) if s_q * s_k else 1.0
