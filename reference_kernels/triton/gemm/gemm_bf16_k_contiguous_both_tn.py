"""
---
id: gemm_bf16_k_contiguous_both_tn
title: TN Linear GEMM y = x W^T + bias, both operands K-contiguous, grouped-N order, bias epilogue
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tn-layout, k-contiguous-operands, contiguity-hints, trans-b-in-dot,
  grouped-n-program-order, l2-reuse, bias-epilogue, fp32-accumulate]
status: reference
launcher: gemm_bf16_k_contiguous_both_tn
tuning:
  block_m: [128, 32, 64]
  block_n: [128, 64, 256]
  block_k: [64, 32, 128]
  group_n: [8, 1, 16]
  num_warps: [8, 4]
  num_stages: [3, 4]
args:
  x: {shape: [M, K], dtypes: [bf16, fp16, fp32], aliases: [input, a, hidden_states]}
  weight: {shape: [N, K], like: x, aliases: [w, b]}
  bias: {shape: [N], like: x, optional: true}
returns:
  - {name: y, shape: [M, N], dtype: x}
problem:
  shapes: [{m: 7, n: 40, k: 80, bias: true}, {m: 33, n: 20, k: 48}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
torch.nn.Linear's layout, "TN": y (M, N) = x (M, K) @ W^T + bias with x and W both stored
row-major along K (W is (N, K)), which this kernel requires rather than accepting any strides:
both tiles are loaded as (rows, BLOCK_K) slabs whose K axis is the unit-stride one (annotated with
max_contiguous / multiple_of so each thread issues 16-byte vector loads and the shared-memory
copies need no transpose), and the weight slab enters the MMA as tl.trans(w), which the compiler
maps to a transposed shared-memory view, not a data movement. Programs are ordered in groups of
GROUP_N column tiles that walk the row tiles together (grouped-N, the mirror of the usual grouped-M
swizzle): for Linear layers where N >> M (wide projections, few hundred tokens) the x row tile is
the small operand shared by consecutive programs and each W tile is read by ceil(M / BLOCK_M)
programs close in time, so both stay in L2. The optional bias is added in fp32 before the single
cast to x's dtype. FLOPs 2*M*N*K; bytes 2 B per x and W element per pass and 2 B per output
(bf16). Limits: non-contiguous inputs are copied first; no split-K for small M; fp32 inputs run
exact fp32 dots (no TF32), far below the tensor-core rate.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_tn_kernel(
    # pointers
    x_ptr,  # (M, K), K contiguous
    w_ptr,  # (N, K), K contiguous
    bias_ptr,  # (N,) or a dummy
    y_ptr,  # (M, N)
    # sizes
    M,
    N,
    K,
    # strides (elements; the K strides are 1)
    stride_xm,
    stride_wn,
    stride_ym,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_N: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    UPCAST: tl.constexpr,
):
    # grouped-N ordering: GROUP_N column tiles share each x row tile, walked row tile by row tile
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    pids_per_group = GROUP_N * num_pid_m
    first_pid_n = (pid // pids_per_group) * GROUP_N
    cols_in_group = min(num_pid_n - first_pid_n, GROUP_N)
    pid_n = first_pid_n + (pid % pids_per_group) % cols_in_group
    pid_m = (pid % pids_per_group) // cols_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.max_contiguous(tl.multiple_of(tl.arange(0, BLOCK_K), BLOCK_K), BLOCK_K)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_k[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_n[:, None] & mask_k[None, :], other=0.0)  # (BLOCK_N, BLOCK_K)
        if UPCAST:
            # interpreter (wrong bf16 dots) or fp32 inputs (no TF32): exact fp32 products
            acc = tl.dot(x.to(tl.float32), tl.trans(w.to(tl.float32)), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, tl.trans(w), acc)  # W^T as a transposed view of the K-major slab
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :]
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int) -> dict[str, int]:
    """Return 128x128x64 tiles with 8 warps, 32 or 64 rows for small M."""
    block_m = 32 if m <= 32 else (64 if m <= 64 else 128)
    return {"block_m": block_m, "block_n": 128, "block_k": 64, "group_n": 8,
            "num_warps": 8 if block_m == 128 else 4, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_bf16_k_contiguous_both_tn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_n: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return y = x @ weight^T (+ bias), torch.nn.functional.linear's semantics for 2-D x.

    Args:
        x: (M, K) bf16/fp16/fp32 (copied if K is not contiguous).
        weight: (N, K) same dtype (copied if K is not contiguous).
        bias: Optional (N,) same dtype.
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Columns per program (power of two >= 16); None = 128.
        block_k: K step (power of two >= 16); None = 64.
        group_n: Column tiles per L2 group; None = 8.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        y: (M, N) in x's dtype, contiguous.

    Raises:
        ValueError: The shapes, dtypes or tiles do not fit.
    """
    if x.dim() != 2 or weight.dim() != 2 or x.shape[1] != weight.shape[1]:
        raise ValueError(
            f"need x (M, K) and weight (N, K); got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if x.dtype != weight.dtype or x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"need x and weight of one dtype in bf16/fp16/fp32; got {x.dtype}, {weight.dtype}"
        )
    m, k = x.shape
    n = weight.shape[0]
    if bias is not None and tuple(bias.shape) != (n,):
        raise ValueError(
            f"need bias ({n},) for weight {tuple(weight.shape)}; got {tuple(bias.shape)}"
        )
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_n": group_n,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    for name in ("block_m", "block_n", "block_k"):
        if cfg[name] < 16 or cfg[name] & (cfg[name] - 1):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot); got {cfg[name]}")
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    x = x if x.stride(1) == 1 else x.contiguous()
    weight = weight if weight.stride(1) == 1 else weight.contiguous()
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    upcast = _interpreting() or x.dtype == torch.float32  # fp32: exact dots, no TF32
    _gemm_tn_kernel[grid](
        x, weight, bias if bias is not None else y, y,
        m, n, k,
        x.stride(0), weight.stride(0), y.stride(0),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_N=cfg["group_n"], HAS_BIAS=bias is not None, UPCAST=upcast,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return y


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """Return x @ weight^T (+ bias) in fp32, cast to x's dtype."""
    y = x.float() @ weight.float().T
    if bias is not None:
        y = y + bias.float()
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight", "bias"}`` for ``{"m", "n", "k"}`` (+ ``"bias": bool``)."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    bias = torch.randn(n, device=device).to(dtype) if shape.get("bias") else None
    weight = (torch.randn(n, k, device=device) * k**-0.5).to(dtype)
    return {"x": torch.randn(m, k, device=device).to(dtype), "weight": weight, "bias": bias}
