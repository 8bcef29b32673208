"""Known operators -> atrex30 problems: how one profiled call becomes a problem's shape.

Owns the mapping table of ``aka trace import``. For each op name (aten ops, and the custom ops of
vLLM and SGLang as their traces name them) it gives the target problem and a function from the
call's recorded dims, dtypes and scalar arguments to that problem's ``init_kwargs`` and
``input_kwargs`` (the parameters of ``Model.__init__`` and ``_make_inputs`` in
``configs/suites/atrex30/<problem>/reference.py``); and for each target the phase rule of its
reference's ``phase_of``. A call the problem does not cover (another dtype, a mask, a causal flag
the problem lacks, an argument the profile did not record) is refused with the reason. Pure data
and arithmetic: no torch, no problem code.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from pydantic import JsonValue

from aka.bench.trace import OpCall
from aka.spec.vocab import Phase

__all__ = ["OP_MAP", "PHASE_RULES", "MappedShape", "OpMapping", "map_call"]

#: A batch of at most this many tokens is a decode step (the atrex30 references' threshold).
DECODE_MAX_TOKENS = 64
#: topk over fewer entries than this is not a vocabulary (a router's top-k, say).
MIN_VOCAB = 1024
#: block_scaled_mm's block: 1 x 128 scales on A, 128 x 128 on B.
SCALE_BLOCK = 128

Kwargs = dict[str, JsonValue]


@dataclass(frozen=True)
class MappedShape:
    """One call as a shape of a suite problem."""

    problem: str
    init_kwargs: Kwargs
    input_kwargs: Kwargs
    phase: Phase


@dataclass(frozen=True)
class _Kw:
    """A converter's answer: the problem's kwargs (and the problem, where the op picks one)."""

    init: Kwargs
    input: Kwargs
    problem: str | None = None


@dataclass(frozen=True)
class OpMapping:
    """A known op: its target problem and how its arguments become the problem's kwargs."""

    problem: str
    convert: Callable[[OpCall], _Kw]
    note: str = ""


class _Refused(Exception):
    """The call is outside what the problem covers; the message says why."""


def map_call(call: OpCall) -> MappedShape | str:
    """Map ``call`` to a problem shape, or return why it cannot be mapped."""
    entry = OP_MAP.get(call.name)
    if entry is None:
        return "no atrex30 problem for this operator"
    try:
        kw = entry.convert(call)
    except _Refused as why:
        return f"{entry.problem}: {why}"
    problem = kw.problem or entry.problem
    return MappedShape(problem, kw.init, kw.input, PHASE_RULES[problem](kw.input))


# --- argument readers ---------------------------------------------------------------------------


def _tensor(call: OpCall, index: int, what: str, dtypes: tuple[str, ...] = ()) -> list[int]:
    dims = call.dims(index)
    if dims is None:
        raise _Refused(f"{what} has no recorded dims (profile with record_shapes=True)")
    if dtypes and call.dtype(index) not in dtypes:
        raise _Refused(f"{what} is {call.dtype(index) or 'of unrecorded dtype'}, not {dtypes[0]}")
    return dims


def _absent(call: OpCall, index: int, what: str) -> None:
    """Refuse when the optional tensor argument ``index`` was passed."""
    if call.dims(index) is not None or call.dtype(index) is not None:
        raise _Refused(f"{what} is given; the problem has none")


def _value(call: OpCall, index: int, what: str) -> JsonValue:
    value = call.value(index)
    if value is None:
        raise _Refused(f"{what} was not recorded (no Concrete Inputs in the profile)")
    return value


def _int(call: OpCall, index: int, what: str) -> int:
    value = _value(call, index, what)
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise _Refused(f"{what} is {value!r}, not an integer")
    return int(value)


def _eps(call: OpCall, index: int, default: float) -> float:
    value = call.value(index)
    return (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else default
    )


def _rows(dims: list[int]) -> int:
    return math.prod(dims[:-1])


def _last_dim_only(call: OpCall, index: int) -> None:
    shape = call.value(index)
    if isinstance(shape, list) and len(shape) != 1:
        raise _Refused(f"normalises over {len(shape)} dims; the problem normalises the last one")


# --- norms and activations ----------------------------------------------------------------------


def _rms_norm(x: int, weight: int, eps: int, shape: int | None = None) -> Callable[[OpCall], _Kw]:
    def convert(call: OpCall) -> _Kw:
        dims = _tensor(call, x, "the input", ("bf16",))
        if call.dims(weight) is None:
            raise _Refused("has no weight; the problem multiplies by one")
        if _tensor(call, weight, "the weight", ("bf16",)) != dims[-1:]:
            raise _Refused("the weight is not one value per column")
        if shape is not None:
            _last_dim_only(call, shape)
        init: Kwargs = {"eps": _eps(call, eps, 1e-6)}
        return _Kw(init, {"token_count": _rows(dims), "hidden_size": dims[-1]})

    return convert


def _fused_add_rms_norm(call: OpCall) -> _Kw:
    dims = _tensor(call, 0, "the input", ("bf16",))
    if _tensor(call, 1, "the residual", ("bf16",)) != dims:
        raise _Refused("the residual's shape differs from the input's")
    if call.dims(2) is None:
        raise _Refused("has no weight; the problem multiplies by one")
    _tensor(call, 2, "the weight", ("bf16",))
    init: Kwargs = {"eps": _eps(call, 3, 1e-6)}
    return _Kw(init, {"token_count": _rows(dims), "hidden_size": dims[-1]})


def _layer_norm(call: OpCall) -> _Kw:
    dims = _tensor(call, 0, "the input", ("bf16",))
    _last_dim_only(call, 1)
    if call.dims(2) is None or call.dims(3) is None:
        raise _Refused("has no affine weight and bias; the problem applies both")
    _tensor(call, 2, "the weight", ("bf16",))
    _tensor(call, 3, "the bias", ("bf16",))
    init: Kwargs = {"eps": _eps(call, 4, 1e-5)}
    if dims[-1] > 8192:
        init["max_hidden_size"] = dims[-1]
    shape: list[JsonValue] = [int(d) for d in dims]
    return _Kw(init, {"shape": shape})


def _linalg_vector_norm(call: OpCall) -> _Kw:
    dims = _tensor(call, 0, "the input", ("bf16",))
    if _value(call, 1, "ord") != 2:
        raise _Refused(f"ord is {call.value(1)!r}; l2_norm is the 2-norm")
    dim = _value(call, 2, "dim")
    if dim not in ([-1], [len(dims) - 1], -1, len(dims) - 1):
        raise _Refused(f"reduces dims {dim!r}; l2_norm reduces the last one")
    if call.value(4) is not None:
        raise _Refused("accumulates in another dtype")
    hidden = dims[-1]
    return _Kw({"hidden_size": hidden}, {"num_tokens": _rows(dims), "hidden_size": hidden})


def _silu_and_mul(call: OpCall) -> _Kw:
    dims = _tensor(call, 1, "the input", ("bf16",))
    out = _tensor(call, 0, "the output", ("bf16",))
    if dims[-1] % 2 or out[-1] * 2 != dims[-1]:
        raise _Refused("the output is not half the input's last dimension")
    shape: list[JsonValue] = [int(d) for d in dims]
    return _Kw({}, {"shape": shape})


# --- attention ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Sdpa:
    """Where an attention op keeps its arguments (schema positions) and its q/k/v layout."""

    layout: str  # "BHSD" or "BSHD"
    dropout: int
    causal: int
    scale: int
    mask: int | None = None
    varlen: int | None = None
    mask_type: bool = False  # causal is an int custom_mask_type (0 none, 1/2 causal)

    def __call__(self, call: OpCall) -> _Kw:
        q = _tensor(call, 0, "q", ("bf16",))
        k = _tensor(call, 1, "k", ("bf16",))
        v = _tensor(call, 2, "v", ("bf16",))
        if not len(q) == len(k) == len(v) == 4:
            raise _Refused("q, k and v are not 4-D")
        head = 1 if self.layout == "BHSD" else 2
        seq = 3 - head
        batch, q_heads, q_len, dim = q[0], q[head], q[seq], q[3]
        kv_heads, kv_len = k[head], k[seq]
        if k[3] != dim or v[3] != dim or v[head] != kv_heads or q_heads % kv_heads:
            raise _Refused("q, k and v disagree on head dim or heads")
        if self.mask is not None:
            _absent(call, self.mask, "an attention mask")
        if self.varlen is not None:
            _absent(call, self.varlen, "varlen cu_seqlens")
        dropout = call.value(self.dropout)
        if isinstance(dropout, int | float) and dropout != 0:
            raise _Refused(f"dropout is {dropout}; the problems have none")
        scale = call.value(self.scale)
        if isinstance(scale, int | float) and abs(scale * math.sqrt(dim) - 1) > 1e-3:
            raise _Refused(f"scale is {scale}, not head_dim^-0.5")
        flag = _value(call, self.causal, "is_causal")
        causal = bool(flag) if not self.mask_type else flag in (1, 2)
        if q_len != kv_len:
            raise _Refused(f"queries ({q_len}) and keys ({kv_len}) differ in length")
        lens: list[JsonValue] = [q_len] * batch
        if causal:
            # unified_attention: causal GQA over a paged cache holding exactly these keys (its
            # shapes have query length == key length, as here).
            paged: Kwargs = {
                "num_seqs": batch,
                "seq_lens": lens,
                "num_query_heads": q_heads,
                "num_kv_heads": kv_heads,
                "head_size": dim,
                "block_size": 16,
            }
            return _Kw({}, paged, "unified_attention")
        if q_heads != kv_heads:
            raise _Refused("grouped KV heads; attention_forward draws as many as query heads")
        return _Kw({}, {"num_heads": q_heads, "head_dim": dim, "seq_lens": lens})


# --- sampling, GEMM, quantisation, RoPE, cache --------------------------------------------------


def _topk(call: OpCall) -> _Kw:
    dims = _tensor(call, 0, "the logits", ("fp32",))
    if len(dims) != 2:
        raise _Refused("the logits are not 2-D (rows x vocabulary)")
    if call.value(2) not in (None, -1, 1):
        raise _Refused(f"selects along dim {call.value(2)!r}, not the last")
    if call.value(3) is False:
        raise _Refused("selects the smallest values")
    if dims[1] < MIN_VOCAB:
        raise _Refused(f"top-k over {dims[1]} < {MIN_VOCAB} entries is not a vocabulary")
    return _Kw({"top_k": _int(call, 1, "k")}, {"seq_len": dims[0], "hidden_size": dims[1]})


def _block_scaled_mm(a: int, b: int, sa: int, sb: int, bias: int | None) -> Callable[[OpCall], _Kw]:
    def convert(call: OpCall) -> _Kw:
        a_dims = _tensor(call, a, "A", ("fp8_e4m3fn",))
        if len(a_dims) != 2:
            raise _Refused("A is not 2-D")
        m, k = a_dims
        b_dims = _tensor(call, b, "B", ("fp8_e4m3fn",))
        if len(b_dims) != 2 or k not in b_dims:
            raise _Refused("B does not share A's inner dimension")
        n = b_dims[1] if b_dims[0] == k else b_dims[0]
        kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
        a_scales = call.dims(sa)
        b_scales = call.dims(sb)
        if a_scales != [m, kb] or b_scales not in ([kb, nb], [nb, kb]):
            raise _Refused("scales are not 1x128 (A) and 128x128 (B) blocks")
        if bias is not None:
            _absent(call, bias, "a bias")
        groups: Kwargs = {"group_n": SCALE_BLOCK, "group_k": SCALE_BLOCK}
        return _Kw(dict(groups), {"m": m, "n": n, "k": k, **groups})

    return convert


def _per_token_fp8(call: OpCall) -> _Kw:
    dims = _tensor(call, 1, "the input", ("bf16",))
    _tensor(call, 0, "the output", ("fp8_e4m3fn",))
    _absent(call, 3, "scale_ub")
    return _Kw({}, {"token_count": _rows(dims), "hidden_size": dims[-1]})


def _rms_norm_per_token_fp8(call: OpCall) -> _Kw:
    dims = _tensor(call, 1, "the input", ("bf16",))
    _tensor(call, 0, "the output", ("fp8_e4m3fn",))
    _tensor(call, 2, "the weight", ("bf16",))
    _absent(call, 5, "scale_ub")
    if call.dims(6) is None:
        raise _Refused("has no residual; fused_rmsnorm_quant adds one")
    _tensor(call, 6, "the residual", ("bf16",))
    return _Kw({"eps": _eps(call, 4, 1e-5)}, {"token_count": _rows(dims), "hidden_size": dims[-1]})


def _rotary_embedding(call: OpCall) -> _Kw:
    q = _tensor(call, 1, "the query", ("bf16", "fp16"))
    if call.dims(2) is None:
        raise _Refused("has no key; fused_qkv_rope rotates q and k")
    k = _tensor(call, 2, "the key", ("bf16", "fp16"))
    head_dim = _int(call, 3, "head_size")
    if _value(call, 5, "is_neox") is not True:
        raise _Refused("GPT-J style (is_neox False); fused_qkv_rope is neox style")
    rope_dim = _tensor(call, 4, "the cos/sin cache")[-1]
    heads: list[int] = []
    for dims in (q, k):
        per_token = dims[-1] * (dims[-2] if dims[-1] == head_dim and len(dims) > 2 else 1)
        if per_token % head_dim:
            raise _Refused(f"a row of {per_token} is not whole heads of {head_dim}")
        heads.append(per_token // head_dim)
    tokens = math.prod(q) // (heads[0] * head_dim)
    if rope_dim % 2 or rope_dim > head_dim:
        raise _Refused(f"rotary dim {rope_dim} does not fit head_dim {head_dim}")
    shape: Kwargs = {"num_heads": heads[0], "num_kv_heads": heads[1], "head_dim": head_dim}
    dtype = call.dtype(1) or "bf16"
    return _Kw({**shape, "rope_dim": rope_dim}, {"total_tokens": tokens, **shape, "dtype": dtype})


def _reshape_and_cache_flash(call: OpCall) -> _Kw:
    key = _tensor(call, 0, "the key", ("bf16",))
    cache = _tensor(call, 2, "the key cache", ("bf16",))
    if len(key) != 3 or len(cache) != 4 or cache[2:] != key[1:]:
        raise _Refused("the cache is not (blocks, block_size, heads, head_dim)")
    if call.value(5) not in (None, "auto"):
        raise _Refused(f"kv_cache_dtype is {call.value(5)!r}; the problem caches bf16")
    shape: list[JsonValue] = [int(d) for d in key]
    return _Kw({}, {"shape": shape, "block_size": cache[1]})


# --- MoE ----------------------------------------------------------------------------------------


def _topk_softmax(
    gating: int, renormalize: int, softcap: int | None = None
) -> Callable[[OpCall], _Kw]:
    def convert(call: OpCall) -> _Kw:
        logits = _tensor(call, gating, "the gating output", ("fp32",))
        weights = _tensor(call, 0, "topk_weights")
        if len(logits) != 2 or len(weights) != 2 or weights[0] != logits[0]:
            raise _Refused("gating output and weights are not (tokens, experts) / (tokens, k)")
        if call.value(renormalize) is True:
            raise _Refused("renormalises the top-k weights; the problem does not")
        if softcap is not None:
            if call.value(softcap) not in (None, 0, 0.0):
                raise _Refused("soft-caps the logits")
            _absent(call, softcap + 1, "a correction bias")
        return _Kw({"top_k": weights[1]}, {"token_count": logits[0], "num_experts": logits[1]})

    return convert


def _moe_align_block_size(call: OpCall) -> _Kw:
    ids = _tensor(call, 0, "topk_ids", ("int32",))
    if len(ids) != 2:
        raise _Refused("topk_ids is not (tokens, k)")
    experts = _int(call, 1, "num_experts")
    block = _int(call, 2, "block_size")
    init: Kwargs = {"block_size": block, "num_experts": experts}
    return _Kw(init, {"token_count": ids[0], "num_experts": experts, "top_k": ids[1]})


def _moe_sum(call: OpCall) -> _Kw:
    dims = _tensor(call, 0, "the input", ("bf16",))
    if len(dims) != 3:
        raise _Refused("the input is not (tokens, k, hidden)")
    init: Kwargs = {"routed_scaling_factor": 1.0}
    return _Kw(init, {"token_count": dims[0], "top_k": dims[1], "hidden_size": dims[2]})


# --- the tables ---------------------------------------------------------------------------------

_AT_SDPA = "aten SDPA -> attention_forward (non-causal) or unified_attention (causal)"

#: Op name -> target problem and converter. Schema positions follow torch 2.11-2.13 and the
#: registrations of vLLM (``_C``, ``_C_cache_ops``, ``_moe_C``) and SGLang (``sgl_kernel``).
OP_MAP: dict[str, OpMapping] = {
    "aten::rms_norm": OpMapping("rms_norm", _rms_norm(0, 2, 3, shape=1)),
    "aten::_fused_rms_norm": OpMapping("rms_norm", _rms_norm(0, 2, 3, shape=1)),
    "_C::rms_norm": OpMapping("rms_norm", _rms_norm(1, 2, 3)),
    "sgl_kernel::rmsnorm": OpMapping("rms_norm", _rms_norm(1, 2, 3)),
    "_C::fused_add_rms_norm": OpMapping("fused_add_rms_norm", _fused_add_rms_norm),
    "sgl_kernel::fused_add_rmsnorm": OpMapping("fused_add_rms_norm", _fused_add_rms_norm),
    "aten::layer_norm": OpMapping("layer_norm", _layer_norm),
    "aten::native_layer_norm": OpMapping("layer_norm", _layer_norm),
    "aten::linalg_vector_norm": OpMapping(
        "l2_norm", _linalg_vector_norm, "the norm of F.normalize; its division is not included"
    ),
    "_C::silu_and_mul": OpMapping("silu_and_mul", _silu_and_mul),
    "sgl_kernel::silu_and_mul": OpMapping("silu_and_mul", _silu_and_mul),
    "aten::scaled_dot_product_attention": OpMapping(
        "attention_forward", _Sdpa("BHSD", dropout=4, causal=5, scale=6, mask=3), _AT_SDPA
    ),
    "aten::_scaled_dot_product_flash_attention": OpMapping(
        "attention_forward", _Sdpa("BHSD", dropout=3, causal=4, scale=6), _AT_SDPA
    ),
    "aten::_scaled_dot_product_flash_attention_for_cpu": OpMapping(
        "attention_forward", _Sdpa("BHSD", dropout=3, causal=4, scale=6, mask=5), _AT_SDPA
    ),
    "aten::_scaled_dot_product_efficient_attention": OpMapping(
        "attention_forward", _Sdpa("BHSD", dropout=5, causal=6, scale=7, mask=3), _AT_SDPA
    ),
    "aten::_scaled_dot_product_cudnn_attention": OpMapping(
        "attention_forward", _Sdpa("BHSD", dropout=5, causal=6, scale=8, mask=3), _AT_SDPA
    ),
    "aten::_flash_attention_forward": OpMapping(
        "attention_forward", _Sdpa("BSHD", dropout=7, causal=8, scale=10, varlen=3), _AT_SDPA
    ),
    "aten::_efficient_attention_forward": OpMapping(
        "attention_forward",
        _Sdpa("BSHD", dropout=8, causal=9, scale=11, mask=3, varlen=4, mask_type=True),
        _AT_SDPA,
    ),
    "aten::topk": OpMapping("topk_filter", _topk, "top-k over a vocabulary-sized fp32 row"),
    "aten::_scaled_mm": OpMapping(
        "block_scaled_mm", _block_scaled_mm(0, 1, 2, 3, 4), "only 1x128 / 128x128 block scales"
    ),
    "_C::cutlass_scaled_mm": OpMapping(
        "block_scaled_mm", _block_scaled_mm(1, 2, 3, 4, 5), "only 1x128 / 128x128 block scales"
    ),
    "sgl_kernel::fp8_blockwise_scaled_mm": OpMapping(
        "block_scaled_mm", _block_scaled_mm(0, 1, 2, 3, None), "1x128 / 128x128 block scales"
    ),
    "_C::dynamic_per_token_scaled_fp8_quant": OpMapping(
        "fp8_dynamic_per_token_quant", _per_token_fp8
    ),
    "_C::rms_norm_dynamic_per_token_quant": OpMapping(
        "fused_rmsnorm_quant", _rms_norm_per_token_fp8, "with a residual"
    ),
    "_C::rotary_embedding": OpMapping(
        "fused_qkv_rope", _rotary_embedding, "neox style, q and k given"
    ),
    "_C_cache_ops::reshape_and_cache_flash": OpMapping(
        "reshape_and_cache", _reshape_and_cache_flash, "bf16 cache"
    ),
    "_C::reshape_and_cache_flash": OpMapping(
        "reshape_and_cache", _reshape_and_cache_flash, "bf16 cache"
    ),
    "_moe_C::topk_softmax": OpMapping(
        "moe_topk_gating_softmax", _topk_softmax(3, 4), "fp32 logits, no renormalisation"
    ),
    "sgl_kernel::topk_softmax": OpMapping(
        "moe_topk_gating_softmax", _topk_softmax(2, 3, softcap=4), "fp32 logits, plain softmax"
    ),
    "_moe_C::moe_align_block_size": OpMapping("moe_align_block_size", _moe_align_block_size),
    "sgl_kernel::moe_align_block_size": OpMapping("moe_align_block_size", _moe_align_block_size),
    "_moe_C::moe_sum": OpMapping("moe_sum_reduce", _moe_sum, "routed scaling factor 1"),
}


def _by_tokens(name: str) -> Callable[[Kwargs], Phase]:
    def rule(kw: Kwargs) -> Phase:
        return Phase.DECODE if _as_int(kw[name]) <= DECODE_MAX_TOKENS else Phase.PREFILL

    return rule


def _by_rows(kw: Kwargs) -> Phase:
    shape = kw["shape"]
    rows = math.prod(_as_int(n) for n in shape[:-1]) if isinstance(shape, list) else 1
    return Phase.DECODE if rows <= DECODE_MAX_TOKENS else Phase.PREFILL


def _one_token(name: str) -> Callable[[Kwargs], Phase]:
    def rule(kw: Kwargs) -> Phase:
        value = kw[name]
        first = value[0] if isinstance(value, list) else value
        return Phase.DECODE if _as_int(first) == 1 else Phase.PREFILL

    return rule


def _one_query_each(kw: Kwargs) -> Phase:
    lens = kw["seq_lens"]
    ones = isinstance(lens, list) and all(_as_int(n) == 1 for n in lens)
    return Phase.DECODE if ones else Phase.PREFILL


def _as_int(value: JsonValue) -> int:
    return int(value) if isinstance(value, int | float) else 0


#: Each target problem's phase rule, as its reference's ``phase_of`` states it (checked against
#: the built-in shapes by tests/spec/test_trace_import.py).
PHASE_RULES: dict[str, Callable[[Kwargs], Phase]] = {
    "rms_norm": _by_tokens("token_count"),
    "fused_add_rms_norm": _by_tokens("token_count"),
    "layer_norm": _by_rows,
    "l2_norm": _by_tokens("num_tokens"),
    "silu_and_mul": _by_rows,
    "attention_forward": lambda _: Phase.PREFILL,
    "unified_attention": _one_query_each,
    "topk_filter": lambda _: Phase.DECODE,
    "block_scaled_mm": _by_tokens("m"),
    "fp8_dynamic_per_token_quant": _by_tokens("token_count"),
    "fused_rmsnorm_quant": _by_tokens("token_count"),
    "fused_qkv_rope": _one_token("total_tokens"),
    "reshape_and_cache": _one_token("shape"),
    "moe_topk_gating_softmax": _by_tokens("token_count"),
    "moe_align_block_size": _by_tokens("token_count"),
    "moe_sum_reduce": _by_tokens("token_count"),
}
