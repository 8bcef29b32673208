"""
---
id: gemm_fp8_per_tensor_scaled
title: FP8 x FP8 GEMM with one scale per tensor applied once in the epilogue, bf16 output
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_89, sm_90]
dtypes: [fp8_e4m3fn, bf16]
bound: compute
techniques: [fp8-tl-dot, per-tensor-scale, scale-in-epilogue, grouped-program-order,
  fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_fp8_per_tensor_scaled
tuning:
  block_m: [128, 16, 32, 64]
  block_n: [128, 64, 256]
  block_k: [128, 64]
  group_m: [8, 1, 16]
  num_warps: [8, 4]
  num_stages: [3, 4]
args:
  a: {shape: [M, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [x, input, qinput]}
  b: {shape: [N, K], dtypes: [fp8_e4m3fn], layout: any, aliases: [w, weight, qweight]}
  scale_a: {shape: [1], dtypes: [fp32], aliases: [a_scale, input_scale, x_scale]}
  scale_b: {shape: [1], dtypes: [fp32], aliases: [b_scale, weight_scale, w_scale]}
returns:
  - {name: out, shape: [M, N], dtype: bf16}
problem:
  shapes: [{m: 5, n: 40, k: 72}, {m: 20, n: 17, k: 160}]
  dtypes: [fp8_e4m3fn]
measured: []
---
The classic FP8 (per-tensor, "tensorwise") linear layer: out = (a @ b^T) * scale_a * scale_b
in bf16, with a (M, K) and b (N, K) e4m3fn and one fp32 scale for each whole tensor. Because the
scales do not vary over K the K loop is a plain chain of fp8 x fp8 tensor-core dots into one fp32
accumulator, with no per-block rescale between MMAs (unlike the block-scaled designs, whose 128-deep
K steps each need a promote-and-rescale); the two scales are read once per program as scalars, and
their product multiplies the accumulator once before the single bf16 rounding at the store.
Programs use grouped-M ordering so GROUP_M row tiles share each b column tile in L2. FLOPs 2*M*N*K
at the fp8 rate (twice bf16's); bytes 1 B per a and b element per pass plus 2 B per output. Wins
for prefill GEMMs of per-tensor quantised checkpoints (the fastest fp8 scheme when the accuracy
suffices). Limits: per-tensor scales lose accuracy against outliers (use the block-scaled kernels
then); fp8 MMA needs sm_89+; the fp32 accumulator of one long K chain is not rescaled, which is
fine for K up to tens of thousands.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_fp8_per_tensor_kernel(
    # pointers
    a_ptr,
    b_ptr,
    sa_ptr,  # fp32 (1,)
    sb_ptr,  # fp32 (1,)
    out_ptr,  # bf16 (M, N)
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_om,
    stride_on,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_M * num_pid_n
    first_pid_m = (pid // pids_per_group) * GROUP_M
    rows_in_group = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % pids_per_group) % rows_in_group
    pid_n = (pid % pids_per_group) // rows_in_group

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
        if UPCAST:
            # CPU interpreter: fp8 codes to fp32, exact products
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)  # fp8 tensor cores, fp32 accumulator, no rescale in the loop
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    scale = tl.load(sa_ptr).to(tl.float32) * tl.load(sb_ptr).to(tl.float32)  # once per program
    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, (acc * scale).to(out_ptr.dtype.element_ty),
             mask=mask_m[:, None] & mask_n[None, :])  # fmt: skip


def _launch_config(m: int) -> dict[str, int]:
    """Return tiles by M bucket: 16..64 rows for decode-sized M, 128x128x128 for prefill."""
    block_m = 16 if m <= 16 else (32 if m <= 32 else (64 if m <= 64 else 128))
    return {"block_m": block_m, "block_n": 128, "block_k": 128, "group_m": 8,
            "num_warps": 8 if block_m == 128 else 4, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_fp8_per_tensor_scaled(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return (a @ b^T) * scale_a * scale_b in bf16.

    Args:
        a: (M, K) fp8 e4m3fn, any strides.
        b: (N, K) fp8 e4m3fn (weight layout), any strides.
        scale_a: (1,) fp32 dequantisation scale of a.
        scale_b: (1,) fp32 dequantisation scale of b.
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Columns per program (power of two >= 16); None = 128.
        block_k: K step (power of two >= 16); None = 128.
        group_m: Row tiles per L2 group; None = 8.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) bf16, contiguous.

    Raises:
        ValueError: The shapes, dtypes or tiles do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need a (M, K) and b (N, K); got a {tuple(a.shape)}, b {tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"need fp8 e4m3fn a and b; got {a.dtype} and {b.dtype}")
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        raise ValueError(f"need fp32 scale_a and scale_b; got {scale_a.dtype}, {scale_b.dtype}")
    if scale_a.numel() != 1 or scale_b.numel() != 1:
        raise ValueError(
            f"need one-element scale_a and scale_b (per-tensor); got {tuple(scale_a.shape)} "
            f"and {tuple(scale_b.shape)}"
        )
    m, k = a.shape
    n = b.shape[0]
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    for name in ("block_m", "block_n", "block_k"):
        if cfg[name] < 16 or cfg[name] & (cfg[name] - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {cfg[name]}")
    out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return out
    sa = scale_a.reshape(1)
    sb = scale_b.reshape(1)
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_fp8_per_tensor_kernel[grid](
        a, b, sa, sb, out,
        m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0), out.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out


def reference(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
) -> torch.Tensor:
    """Return the dequantised product in fp32, cast once to bf16."""
    scale = scale_a.float().reshape(()) * scale_b.float().reshape(())
    return ((a.float() @ b.float().T) * scale).to(torch.bfloat16)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float8_e4m3fn, device: str = "cpu") -> dict:
    """Return ``{"a", "b", "scale_a", "scale_b"}`` for ``{"m", "n", "k"}``, fp8 per-tensor."""
    if dtype != torch.float8_e4m3fn:
        raise ValueError(f"gemm_fp8_per_tensor_scaled stores fp8 e4m3fn operands; got {dtype}")
    out = {}
    for name, rows in (("a", shape["m"]), ("b", shape["n"])):
        x = torch.randn(rows, shape["k"], device=device)
        scale = (x.abs().amax() / 448.0).clamp_min(1e-10).reshape(1)
        out[name] = (x / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        out[f"scale_{name}"] = scale
    return out
