"""
---
id: dequant_fp8_per_token
title: FP8 e4m3 with per-token scales back to bf16/fp16/fp32 on (token block x column block) tiles
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, bf16, fp16, fp32]
bound: memory
techniques: [2d-tiles, row-broadcast-scale, fp8-e4m3, dequantization, vectorized-loads]
status: reference
launcher: dequant_fp8_per_token
tuning:
  block_t: [4, 1, 2, 8, 16]
  block_n: [1024, 256, 512, 2048]
  num_warps: [4, 2, 8]
args:
  q: {shape: [T, N], dtypes: [fp8_e4m3fn], aliases: [x_q, input, qweight]}
  scale: {shape: [T, 1], dtypes: [fp32], aliases: [scales, x_scale]}
  out_dtype: {type: str, default: bf16}
returns:
  - {name: out, shape: [T, N], dtype: bf16}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 9, hidden: 64}]
  dtypes: [bf16]  # returns: declares bf16 (out_dtype's default); fp32 would not map
measured: []
---
The inverse of dynamic per-token FP8 quantisation: out[t, n] = float(q[t, n]) * scale[t], computed
in fp32 (the e4m3 value converts exactly) and rounded once to out_dtype (bf16 by default; fp16 and
fp32 too). Used to check quantised activations, to build a bf16 fallback of an FP8 KV or activation
buffer, and in debugging FP8 GEMMs. Program (i, j) owns a BLOCK_T x BLOCK_N tile; the BLOCK_T row
scales are loaded once per tile (one 4-byte load per row) and broadcast along the columns, so the
loop-free body is one 1-byte vector load, one multiply and one store per element. Bytes per element:
1 read + 2 writes in bf16 (3 bytes) plus 4 bytes per row. Limits: per-token (row) scales only (a
per-tensor scale is a (T, 1) tensor of one value; block scales need another kernel); e4m3fn only (no
e5m2 or ROCm fnuz); the output dtype is fixed at launch, so the adapter's contract declares bf16.
"""

import torch
import triton
import triton.language as tl

#: out_dtype names and their torch dtypes (an immutable table: pairs, looked up by _out_dtype)
OUT_DTYPES = (("bf16", torch.bfloat16), ("fp16", torch.float16), ("fp32", torch.float32))


@triton.jit
def _dequant_fp8_per_token_kernel(
    # pointers
    q_ptr,
    scale_ptr,
    out_ptr,
    # sizes
    T,
    N,
    # strides (elements; the last dim is contiguous)
    stride_qt,
    stride_st,
    stride_ot,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    offs_t = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_t = offs_t < T
    mask = mask_t[:, None] & (offs_n < N)[None, :]
    rows = offs_t[:, None].to(tl.int64)  # int64: row * stride can pass 2^31 elements
    scale = tl.load(scale_ptr + offs_t * stride_st, mask=mask_t, other=0.0)  # one per row
    q = tl.load(q_ptr + rows * stride_qt + offs_n[None, :], mask=mask, other=0.0)
    out = q.to(tl.float32) * scale[:, None]
    out_ptrs = out_ptr + rows * stride_ot + offs_n[None, :]
    tl.store(out_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask)


def _out_dtype(name: str) -> torch.dtype:
    """Return the torch dtype of an out_dtype name, or raise ValueError naming the choices."""
    for key, dtype in OUT_DTYPES:
        if key == name:
            return dtype
    raise ValueError(f"out_dtype must be one of {[key for key, _ in OUT_DTYPES]}; got {name!r}")


def _launch_config(t: int, n: int) -> dict[str, int]:
    """Return a tile of up to 1024 columns, rows stacked to ~4K elements, 4 warps."""
    block_n = min(1024, triton.next_power_of_2(n))
    block_t = max(1, min(16, 4096 // block_n, triton.next_power_of_2(t)))
    return {"block_t": block_t, "block_n": block_n, "num_warps": 4}


def dequant_fp8_per_token(
    q: torch.Tensor,
    scale: torch.Tensor,
    out_dtype: str = "bf16",
    *,
    block_t: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return q.float() * scale rounded to out_dtype.

    Args:
        q: (T, N) float8_e4m3fn, last dimension contiguous.
        scale: (T, 1) or (T,) fp32 per-token scales.
        out_dtype: "bf16", "fp16" or "fp32".
        block_t: Rows per tile (power of two); None picks by N.
        block_n: Columns per tile (power of two); None = min(next_pow2(N), 1024).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (T, N) in out_dtype, contiguous.

    Raises:
        ValueError: Wrong dtypes or shapes, or an unknown out_dtype.
    """
    if q.dim() != 2 or q.dtype != torch.float8_e4m3fn:
        raise ValueError(f"q must be (T, N) float8_e4m3fn; got {tuple(q.shape)} {q.dtype}")
    t, n = q.shape
    if scale.dtype != torch.float32 or scale.numel() != t or scale.shape[0] != t:
        raise ValueError(
            f"scale must be ({t}, 1) or ({t},) fp32 for q {tuple(q.shape)}; "
            f"got {tuple(scale.shape)} {scale.dtype}"
        )
    o_dtype = _out_dtype(out_dtype)
    q = q if q.stride(-1) == 1 else q.contiguous()
    out = torch.empty((t, n), dtype=o_dtype, device=q.device)
    if out.numel() == 0:
        return out
    cfg = _launch_config(t, n)
    given = {"block_t": block_t, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(t, cfg["block_t"]), triton.cdiv(n, cfg["block_n"]))
    _dequant_fp8_per_token_kernel[grid](
        q, scale, out,
        t, n,
        q.stride(0), scale.stride(0), out.stride(0),
        BLOCK_T=cfg["block_t"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(q: torch.Tensor, scale: torch.Tensor, out_dtype: str = "bf16") -> torch.Tensor:
    """Return q.float() * scale in fp32, cast to out_dtype."""
    return (q.float() * scale.reshape(-1, 1)).to(_out_dtype(out_dtype))


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"q", "scale", "out_dtype"}`` for ``shape = {"rows", "hidden"}``.

    q and scale are the per-token fp8 quantisation of N(0, 1) rows; ``dtype`` is the output dtype.
    """
    x = torch.randn(shape["rows"], shape["hidden"], device=device)
    scale = (x.abs().amax(dim=-1, keepdim=True) / 448.0).clamp(min=1e-10)
    q = (x / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    name = next(key for key, value in OUT_DTYPES if value == dtype)
    return {"q": q, "scale": scale, "out_dtype": name}
