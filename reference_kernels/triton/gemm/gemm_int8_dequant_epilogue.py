"""
---
id: gemm_int8_dequant_epilogue
title: W8A8 int8 GEMM, int32 accumulation, per-row and per-column scales in the epilogue, bf16 out
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [int8, fp32, bf16]
bound: compute
techniques: [int8-tl-dot, int32-accumulate, dequant-epilogue, per-token-scale,
  per-channel-scale, grouped-program-order, weight-layout-b]
status: reference
launcher: gemm_int8_dequant_epilogue
tuning:
  block_m: [64, 32, 128]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  group_m: [8, 1]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [int8], layout: any, aliases: [x, input, x_q]}
  b: {shape: [N, K], dtypes: [int8], layout: any, aliases: [w, weight, w_q]}
  a_scale: {shape: [M], dtypes: [fp32], aliases: [scale_a, x_scale, input_scale]}
  b_scale: {shape: [N], dtypes: [fp32], aliases: [scale_b, w_scale, weight_scale]}
returns:
  - {name: c, shape: [M, N], dtype: bf16}
problem:
  shapes: [{m: 33, n: 40, k: 200}, {m: 1, n: 17, k: 64}]
  dtypes: [int8]
measured: []
---
The W8A8 linear of SmoothQuant-style inference: A (M, K) int8 activations quantised per token
with scales a_scale (M,), B (N, K) int8 weights quantised per output channel with b_scale (N,),
C = (A @ B^T) * a_scale[:, None] * b_scale[None, :] in bf16. Because both scales are constant
along K, they factor out of the dot product: the K loop is pure int8 x int8 tl.dot into an int32
accumulator (exact, no rounding at all while K * 127 * 128 < 2^31, i.e. K < 131000), and the
scales are applied once per output element in the epilogue (int32 -> fp32, times the row scale,
times the column scale, one rounding to bf16). int8 MMA runs at twice the bf16 rate on Ampere and
Hopper and the operands are half the bytes: 1 B per A and B element, 4 B per row or column scale,
2 B per output. Tiles are ordered in groups of GROUP_M row tiles for L2 reuse of B. Limits: per
group (K-blocked) scales cannot be factored out this way (they need a rescale per K block); no
asymmetric zero points (an azp term would add a row-sum correction); no split-K for decode sizes.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_int8_dequant_epilogue_kernel(
    # pointers
    a_ptr,
    b_ptr,
    a_scale_ptr,
    b_scale_ptr,
    c_ptr,
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
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
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

    # exact integer accumulation: the scales are constant along K and wait for the epilogue
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)  # int8 MMA (IMMA) into int32
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # dequantising epilogue: int32 -> fp32, times the row and the column scale, round to bf16
    a_scale = tl.load(a_scale_ptr + offs_m, mask=mask_m, other=0.0)
    b_scale = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
    out = acc.to(tl.float32) * a_scale[:, None] * b_scale[None, :]
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles, group, warps and stages: 128x128 tiles for big problems, 64x64 otherwise."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8,
                "num_stages": 3}  # fmt: skip
    return {"block_m": 64, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def gemm_int8_dequant_epilogue(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = (A @ B^T) * a_scale[:, None] * b_scale[None, :] in bf16.

    Args:
        a: (M, K) int8 activations, any strides.
        b: (N, K) int8 weights (a linear layer's layout), any strides.
        a_scale: (M,) fp32 per-token scales.
        b_scale: (N,) fp32 per-output-channel scales.
        block_m: Rows of C per program (power of two >= 16); None picks by size.
        block_n: Columns of C per program (power of two >= 16); None picks by size.
        block_k: K step of the inner loop (power of two >= 32 for int8 MMA); None = 64.
        group_m: Row tiles per group of the grouped program order; None = 8.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        C: (M, N) bf16, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit, or K is too long for exact int32 sums.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise ValueError(f"need int8 A and B; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if a_scale.shape != (m,) or b_scale.shape != (n,):
        raise ValueError(
            f"need a_scale ({m},) and b_scale ({n},); got {tuple(a_scale.shape)} and "
            f"{tuple(b_scale.shape)} (flatten (M, 1) scales with .view(-1))"
        )
    if a_scale.dtype != torch.float32 or b_scale.dtype != torch.float32:
        raise ValueError(f"need fp32 scales; got {a_scale.dtype} and {b_scale.dtype}")
    if k * 128 * 128 >= 2**31:
        raise ValueError(f"K = {k} could overflow the int32 accumulator; K must be < 131072")
    c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_int8_dequant_epilogue_kernel[grid](
        a, b, a_scale.contiguous(), b_scale.contiguous(), c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(
    a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor
) -> torch.Tensor:
    """Return the exact integer product (fp64 holds it) scaled in fp32, rounded to bf16."""
    acc = (a.double() @ b.double().T).float()
    return (acc * a_scale.float()[:, None] * b_scale.float()[None, :]).to(torch.bfloat16)


def make_inputs(shape: dict, dtype: torch.dtype = torch.int8, device: str = "cpu") -> dict:
    """Return int8 operands and fp32 scales for ``{"m", "n", "k"}``, quantised from N(0, 1) data.

    Per-token (rows of A) and per-channel (rows of B) symmetric absmax quantisation; ``dtype`` is
    the storage dtype of the operands and must be torch.int8.
    """
    if dtype != torch.int8:
        raise ValueError(f"gemm_int8_dequant_epilogue stores int8 operands; got dtype {dtype}")
    m, n, k = shape["m"], shape["n"], shape["k"]
    x = torch.randn(m, k, device=device)
    w = torch.randn(n, k, device=device) * k**-0.5
    x_scale = x.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    w_scale = w.abs().amax(dim=1).clamp_min(1e-8) / 127.0
    return {
        "a": torch.round(x / x_scale[:, None]).to(torch.int8),
        "b": torch.round(w / w_scale[:, None]).to(torch.int8),
        "a_scale": x_scale.float(),
        "b_scale": w_scale.float(),
    }
