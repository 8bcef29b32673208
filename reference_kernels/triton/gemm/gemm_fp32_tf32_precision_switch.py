"""
---
id: gemm_fp32_tf32_precision_switch
title: fp32 GEMM whose tl.dot input precision (ieee, tf32, tf32x3) is a tuning knob
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: compute
techniques: [tl-dot, tf32-tensor-cores, tf32x3-split, ieee-fp32-fma, precision-knob,
  grouped-program-order]
status: reference
launcher: gemm_fp32_tf32_precision_switch
tuning:
  input_precision: [tf32x3, ieee, tf32]
  block_m: [64, 32, 128]
  block_n: [64, 32, 128]
  block_k: [32, 16, 64]
  group_m: [8, 1]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [fp32], layout: any, aliases: [x, input]}
  b: {shape: [N, K], dtypes: [fp32], layout: any, aliases: [w, weight]}
returns:
  - {name: c, shape: [M, N], dtype: fp32}
problem:
  shapes: [{m: 33, n: 40, k: 72}, {m: 1, n: 17, k: 200}]
  dtypes: [fp32]
measured: []
---
C = A @ B^T for fp32 A (M, K) and B (N, K), where the only design choice that matters is how
tl.dot multiplies fp32 tiles, exposed as the input_precision knob. "tf32" rounds both operands to
TF32 (10 mantissa bits) and runs the tensor cores at full rate (H100 SXM about 495 dense TFLOPS
against 67 for fp32 FMA); each product then carries a relative error near 2^-11, so outputs drift
by roughly 1e-3 of their RMS for K in the thousands: fine for a training step, not for a 1e-4 fp32
check. "tf32x3" splits each operand into a TF32 high part and a TF32 residual and issues three MMAs
(hi*hi + hi*lo + lo*hi), recovering about fp32 accuracy (relative error near 1e-6) at about a third
of the TF32 rate, still well above FMA speed. "ieee" uses plain fp32 FMAs on the CUDA cores: exact
fp32 products, slowest. The default is tf32x3, the fastest setting that passes fp32's 1e-4
tolerance. Tiles are visited in groups of GROUP_M row tiles (L2 reuse of B); bytes 4 B per operand
element per tile pass and 4 B per output. Limits: the knob is a constexpr (one compile per
setting); the CPU interpreter ignores it and always multiplies in fp32; tf32 results depend on the
GPU generation's rounding, so they are not portable bit for bit.
"""

import torch
import triton
import triton.language as tl

PRECISIONS = ("tf32x3", "ieee", "tf32")


@triton.jit
def _gemm_fp32_precision_kernel(
    # pointers
    a_ptr,
    b_ptr,
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
    INPUT_PRECISION: tl.constexpr,  # "ieee" | "tf32" | "tf32x3"
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

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)  # the knob
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc, mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int, n: int) -> dict[str, int | str]:
    """Return tiles by size (fp32 tiles are twice the bytes of bf16: BLOCK_K stays at 32)."""
    big = m >= 512 and n >= 512
    tile = 128 if big else 64
    return {"input_precision": "tf32x3", "block_m": tile, "block_n": tile,
            "block_k": 32, "group_m": 8, "num_warps": 8 if big else 4, "num_stages": 3}  # fmt: skip


def gemm_fp32_tf32_precision_switch(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    input_precision: str | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T in fp32 with the chosen tl.dot input precision.

    Args:
        a: (M, K) fp32, any strides.
        b: (N, K) fp32, any strides.
        input_precision: "tf32x3" (about fp32 accuracy), "ieee" (exact fp32 FMAs, slowest) or
            "tf32" (fastest, ~1e-3 relative error); None = "tf32x3".
        block_m: Rows per program (power of two >= 16); None picks by size.
        block_n: Columns per program (power of two >= 16); None picks by size.
        block_k: K step (power of two >= 16); None = 32.
        group_m: Row tiles per group of the grouped order; None = 8.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        C: (M, N) fp32, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit, or the precision is unknown.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise ValueError(f"need fp32 A and B (cast bf16 inputs first); got {a.dtype}, {b.dtype}")
    if input_precision is not None and input_precision not in PRECISIONS:
        raise ValueError(f"input_precision must be one of {PRECISIONS}; got {input_precision!r}")
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"input_precision": input_precision, "block_m": block_m, "block_n": block_n,
             "block_k": block_k, "group_m": group_m, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, int(cfg["block_m"])) * triton.cdiv(n, int(cfg["block_n"])),)
    _gemm_fp32_precision_kernel[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], INPUT_PRECISION=cfg["input_precision"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T in fp64, rounded to fp32 (the accuracy every setting is judged against)."""
    return (a.double() @ b.double().T).float()


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return fp32 ``{"a", "b"}`` for ``{"m", "n", "k"}``: N(0, 1) A, K^-1/2-scaled B."""
    if dtype != torch.float32:
        raise ValueError(f"gemm_fp32_tf32_precision_switch takes fp32 operands; got {dtype}")
    m, n, k = shape["m"], shape["n"], shape["k"]
    return {"a": torch.randn(m, k, device=device),
            "b": torch.randn(n, k, device=device) * k**-0.5}  # fmt: skip
