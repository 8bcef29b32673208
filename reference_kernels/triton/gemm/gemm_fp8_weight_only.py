"""
---
id: gemm_fp8_weight_only
title: Weight-only fp8 GEMM, e4m3 weights upcast to bf16 in the K loop, per-channel scale epilogue
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [bf16, fp16, fp32, fp8_e4m3fn]
bound: memory
techniques: [weight-only-quant, fp8-upcast-in-k-loop, per-channel-scale, dequant-epilogue,
  tiled-tl-dot, grouped-program-order, fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_fp8_weight_only
tuning:
  block_m: [16, 32, 64, 128]
  block_n: [64, 32, 128]
  block_k: [128, 64, 256]
  group_m: [8, 1]
  num_warps: [4, 2, 8]
  num_stages: [4, 3]
args:
  x: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [a, input, hidden_states]}
  w: {shape: [N, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [b, weight, qweight]}
  w_scale: {shape: [N], dtypes: [fp32], aliases: [scale, weight_scale, scale_b]}
returns:
  - {name: y, shape: [M, N], dtype: x}
problem:
  shapes: [{m: 5, n: 40, k: 200}, {m: 1, n: 17, k: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
W8A16 with fp8 weights: y = (x @ dequant(w)^T) where dequant(w)[n, k] = w[n, k] * w_scale[n], x
(M, K) bf16/fp16 activations, w (N, K) float8_e4m3fn codes and w_scale (N,) fp32 per output
channel. The weights stay fp8 in HBM (1 B each, half of bf16): each K step loads a (BLOCK_K,
BLOCK_N) fp8 tile, converts it to the activation dtype in registers (e4m3 -> bf16 is exact: every
e4m3 value is a bf16 value) and feeds a bf16 tl.dot with the fp32 accumulator. Because the scale is
constant along K it is applied once per output in the epilogue, not per weight in the loop.
Activations stay 16-bit, so no activation quantisation error and no per-token scale pass, unlike
W8A8. In decode (M <= 64) the GEMM is bound by reading W: bytes N*K + 2*M*K + 2*M*N, about half
a bf16 GEMM's, so up to twice as fast. Limits: the conversion costs ALU work per weight per row
tile, so for large M (compute bound) an fp8 x fp8 MMA (W8A8) is faster; fp8 conversion needs
sm_89+; per-group (block) scales need a rescale per K block instead of the epilogue; no split-K.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_fp8_weight_only_kernel(
    # pointers
    x_ptr,
    w_ptr,
    scale_ptr,
    y_ptr,
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_ym,
    stride_yn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            # e4m3 -> activation dtype is exact; one 16-bit MMA into the fp32 accumulator
            acc = tl.dot(x, w.to(x_ptr.dtype.element_ty), acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk

    # the per-channel scale is constant along K: one multiply per output
    scale = tl.load(scale_ptr + offs_n, mask=mask_n, other=0.0)
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :] * stride_yn
    out = acc * scale[None, :]
    tl.store(y_ptrs, out.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int) -> dict[str, int]:
    """Return tiles, group, warps and stages: short row tiles and long K steps for decode."""
    if m <= 16:
        return {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
                "num_stages": 4}  # fmt: skip
    if m <= 128:
        return {"block_m": 64, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
                "num_stages": 4}  # fmt: skip
    return {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_fp8_weight_only(
    x: torch.Tensor,
    w: torch.Tensor,
    w_scale: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return y = x @ (w * w_scale[:, None])^T with fp8 weights dequantised on the fly.

    Args:
        x: (M, K) bf16/fp16/fp32 activations, any strides.
        w: (N, K) float8_e4m3fn weight codes, any strides.
        w_scale: (N,) fp32 per-output-channel scales.
        block_m: Rows of y per program (power of two >= 16); None picks by M.
        block_n: Columns of y per program (power of two >= 16); None picks by M.
        block_k: K step of the inner loop (power of two >= 32); None picks by M.
        group_m: Row tiles per group of the grouped program order; None = 8.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None picks by M.

    Returns:
        y: (M, N) in ``x``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"need x (M, K) and w (N, K); got x {tuple(x.shape)}, w {tuple(w.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need bf16/fp16/fp32 activations x; got {x.dtype}")
    if w.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need float8_e4m3fn weights w; got {w.dtype}")
    m, k = x.shape
    n = w.shape[0]
    if w_scale.shape != (n,) or w_scale.dtype != torch.float32:
        raise ValueError(
            f"need w_scale ({n},) fp32, one scale per row of w; got {tuple(w_scale.shape)} "
            f"{w_scale.dtype}"
        )
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_fp8_weight_only_kernel[grid](
        x, w, w_scale.contiguous(), y,
        m, n, k,
        x.stride(0), x.stride(1),
        w.stride(0), w.stride(1),
        y.stride(0), y.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return y


def reference(x: torch.Tensor, w: torch.Tensor, w_scale: torch.Tensor) -> torch.Tensor:
    """Return x @ (w * w_scale)^T with the product in fp32, cast to x's dtype."""
    return ((x.float() @ w.float().T) * w_scale.float()[None, :]).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "w", "w_scale"}`` for ``{"m", "n", "k"}``.

    x ~ N(0, 1) in ``dtype``; w from N(0, 1) * K^-0.5 weights quantised per row to e4m3 (absmax
    mapped to 448).
    """
    m, n, k = shape["m"], shape["n"], shape["k"]
    weights = torch.randn(n, k, device=device) * k**-0.5
    scale = weights.abs().amax(dim=1).clamp_min(1e-8) / 448.0
    return {
        "x": torch.randn(m, k, device=device).to(dtype),
        "w": (weights / scale[:, None]).to(torch.float8_e4m3fn),
        "w_scale": scale.float(),
    }
