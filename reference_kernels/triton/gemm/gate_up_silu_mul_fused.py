"""
---
id: gate_up_silu_mul_fused
title: Gate/up GEMM against a stacked [2N, K] weight with SiLU(gate) * up fused in the epilogue
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tl-dot, dual-accumulator, fused-silu-and-mul, fp32-accumulate,
  grouped-program-order, single-rounding]
status: reference
launcher: gate_up_silu_mul_fused
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 32, 128]
  block_k: [32, 16, 64]
  group_m: [8, 1]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, hidden_states]}
  w: {shape: [2*N, K], like: a, layout: any, aliases: [weight, w13, gate_up_proj, b]}
returns:
  - {name: out, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 33, n: 40, k: 72}, {m: 1, n: 17, k: 100}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
The first half of a SwiGLU MLP in one kernel: out = SiLU(A @ Wg^T) * (A @ Wu^T), where the weight
W (2N, K) stacks the gate projection (rows [0, N)) over the up projection (rows [N, 2N)), as
vLLM's merged gate_up_proj stores it. A program owns output columns [n0, n0 + BLOCK_N) of a row
tile and keeps TWO fp32 accumulators, one for gate rows n0.. and one for up rows N + n0..; each K
step loads the A tile once and feeds it to two tl.dot calls, so A is read once for both
projections. The epilogue computes SiLU(g) * u in fp32 (sigmoid via exp2) and rounds once. Against
a GEMM writing the (M, 2N) gate_up tensor and a separate silu_and_mul this saves writing and
re-reading 2N values per row (2 * 2 + 2 B per output element in bf16 become 2 B) and the
intermediate rounding of g and u. FLOPs: 4*M*N*K. Limits: two accumulators double the register
tile, so BLOCK_M x BLOCK_N is half what a plain GEMM would use; gate and up must be stacked
halves (not interleaved rows); no split-K for decode M.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gate_up_silu_mul_kernel(
    # pointers
    a_ptr,
    w_ptr,  # (2N, K): gate rows [0, N), up rows [N, 2N)
    out_ptr,
    # sizes
    M,
    N,
    K,
    UP_OFFSET,  # N * stride_wn, from the host (int64 when large)
    # strides (elements)
    stride_am,
    stride_ak,
    stride_wn,
    stride_wk,
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
    g_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wk
    u_ptrs = g_ptrs + UP_OFFSET  # the up half starts N rows further

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        mask_w = mask_k[:, None] & mask_n[None, :]
        g = tl.load(g_ptrs, mask=mask_w, other=0.0)
        u = tl.load(u_ptrs, mask=mask_w, other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            a32 = a.to(tl.float32)
            acc_g = tl.dot(a32, g.to(tl.float32), acc_g, input_precision="ieee")
            acc_u = tl.dot(a32, u.to(tl.float32), acc_u, input_precision="ieee")
        else:
            acc_g = tl.dot(a, g, acc_g)  # one A tile feeds both projections
            acc_u = tl.dot(a, u, acc_u)
        a_ptrs += BLOCK_K * stride_ak
        g_ptrs += BLOCK_K * stride_wk
        u_ptrs += BLOCK_K * stride_wk

    # epilogue: SiLU(g) * u in fp32, one rounding
    out = acc_g / (1.0 + tl.exp2(-acc_g * 1.4426950408889634)) * acc_u
    o_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_om + offs_n[None, :] * stride_on
    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles by size (half the register tile of a plain GEMM: two accumulators)."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 8,
                "num_stages": 3}  # fmt: skip
    block_m = 16 if m <= 16 else (32 if m <= 32 else 64)
    return {"block_m": block_m, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gate_up_silu_mul_fused(
    a: torch.Tensor,
    w: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return SiLU(A @ W[:N]^T) * (A @ W[N:]^T) for a stacked gate/up weight W (2N, K).

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        w: (2N, K) same dtype, gate rows first, any strides.
        block_m: Rows per program (power of two >= 16); None picks by M.
        block_n: Output columns per program (power of two >= 16); None = 64.
        block_k: K step (power of two >= 16); None = 32.
        group_m: Row tiles per group of the grouped order; None = 8.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None = 3.

    Returns:
        out: (M, N) in ``a``'s dtype, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if a.dim() != 2 or w.dim() != 2 or a.shape[1] != w.shape[1]:
        raise ValueError(f"need A (M, K) and W (2N, K); got A {tuple(a.shape)}, W {tuple(w.shape)}")
    if w.shape[0] % 2:
        raise ValueError(f"W {tuple(w.shape)} must have an even row count 2N (gate over up)")
    if a.dtype not in (torch.bfloat16, torch.float16, torch.float32) or w.dtype != a.dtype:
        raise ValueError(f"need matching bf16/fp16/fp32 A and W; got {a.dtype} and {w.dtype}")
    m, k = a.shape
    n = w.shape[0] // 2
    out = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return out
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gate_up_silu_mul_kernel[grid](
        a, w, out,
        m, n, k, n * w.stride(0),
        a.stride(0), a.stride(1),
        w.stride(0), w.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return out


def reference(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Return SiLU(gate) * up from one fp32 matmul against W, cast to A's dtype."""
    n = w.shape[0] // 2
    gate_up = a.float() @ w.float().T
    return (torch.nn.functional.silu(gate_up[:, :n]) * gate_up[:, n:]).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "w"}`` for ``{"m", "n", "k"}``: N(0, 1) A and a K^-1/2-scaled W (2N, K)."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return {
        "a": torch.randn(m, k, device=device).to(dtype),
        "w": (torch.randn(2 * n, k, device=device) * k**-0.5).to(dtype),
    }
