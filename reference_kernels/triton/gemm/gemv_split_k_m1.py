"""
---
id: gemv_split_k_m1
title: M=1 GEMV y = x W^T on CUDA cores, split-K over programs, fp32 atomics then a cast kernel
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [gemv, split-k, no-tensor-cores, fp32-atomic-add, cast-epilogue-kernel,
  fp32-accumulate]
status: reference
launcher: gemv_split_k_m1
tuning:
  split_k: [4, 1, 2, 8, 16]
  block_n: [32, 8, 16, 64]
  block_k: [256, 64, 128, 512]
  num_warps: [4, 2, 8]
args:
  a: {shape: [1, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, hidden_states]}
  b: {shape: [N, K], like: a, aliases: [w, weight]}
returns:
  - {name: c, shape: [1, N], dtype: a}
problem:
  shapes: [{n: 40, k: 1000}, {n: 17, k: 200}]
  dtypes: [fp32, bf16]
measured: []
---
The single-token linear layer of decode: c (1, N) = a (1, K) @ b (N, K)^T. A program owns BLOCK_N
output columns and one of SPLIT_K contiguous K slices; per K step it loads a (BLOCK_N, BLOCK_K)
weight tile with each row's K run contiguous (16-byte vector loads), multiplies it by the broadcast
x chunk and reduces along K into a BLOCK_N fp32 vector on the CUDA cores: no tl.dot, because one
row would fill a 16-row MMA tile to 1/16 and waste the padding's registers. The slices' partial
sums meet in an fp32 (N,) workspace through atomic adds; a second tiny kernel casts it to bf16/fp16
(for fp32 the workspace is the result). The grid is cdiv(N, BLOCK_N) x SPLIT_K, so even N = 2048
with BLOCK_N = 32 makes 64 x 4 programs, enough to cover the SMs' memory pipes. Bytes: 2 B per
weight element (bf16) read exactly once, the x vector (from L1/L2) and 4 B x 2 per output; FLOPs
2*N*K at ~1 FLOP/B, so it runs at HBM bandwidth. Unlike gemm_split_k (tensor-core tiles for M up
to 64) this serves only M = 1. Limits: atomics make the sum order vary (not bitwise
deterministic); each extra split adds N fp32 atomics; a batch of tokens must use a GEMM instead.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gemv_split_k_kernel(
    # pointers
    x_ptr,  # (K,) the single activation row
    w_ptr,  # (N, K) weight, K contiguous
    acc_ptr,  # fp32 (N,) workspace, zeroed by the host
    # sizes
    N,
    K,
    K_PER_SPLIT,  # a multiple of BLOCK_K
    # strides (elements)
    stride_xk,
    stride_wn,
    # meta
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    offs_n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_n = offs_n < N
    k_lo = tl.program_id(1) * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, K)
    offs_k = tl.arange(0, BLOCK_K)
    w_rows = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn

    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k_start in range(k_lo, k_hi, BLOCK_K):
        cols = k_start + offs_k
        mask_k = cols < k_hi
        x = tl.load(x_ptr + cols * stride_xk, mask=mask_k, other=0.0).to(tl.float32)
        w = tl.load(w_rows + cols[None, :], mask=mask_n[:, None] & mask_k[None, :], other=0.0)
        acc += tl.sum(w.to(tl.float32) * x[None, :], axis=1)  # CUDA-core dot products

    # partial sums of the K slices meet in fp32 (order-free, not bitwise deterministic)
    tl.atomic_add(acc_ptr + offs_n, acc, mask=mask_n, sem="relaxed")


@triton.jit
def _gemv_cast_kernel(src_ptr, dst_ptr, numel, BLOCK: tl.constexpr):
    # the epilogue: the fp32 sums rounded once to the output dtype
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    val = tl.load(src_ptr + offs, mask=mask, other=0.0)
    tl.store(dst_ptr + offs, val.to(dst_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int, k: int) -> dict[str, int]:
    """Return a split count aiming at ~4 programs per SM (132 SMs), and the tile."""
    block_n, block_k = 32, 256
    col_tiles = triton.cdiv(n, block_n)
    split_k = max(1, min(16, triton.cdiv(k, block_k), triton.cdiv(4 * 132, col_tiles)))
    return {"split_k": split_k, "block_n": block_n, "block_k": block_k, "num_warps": 4}


def gemv_split_k_m1(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    split_k: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return c (1, N) = a (1, K) @ b (N, K)^T with K split across programs.

    Args:
        a: (1, K) bf16/fp16/fp32 single row, any strides.
        b: (N, K) same dtype, K contiguous (it is copied otherwise).
        split_k: Number of K slices (>= 1); None aims at ~4 programs per SM.
        block_n: Output columns per program (power of two); None = 32.
        block_k: K step (power of two); None = 256.
        num_warps: Warps per program; None = 4.

    Returns:
        c: (1, N) in ``a``'s dtype, contiguous.

    Raises:
        ValueError: ``a`` is not one row, the shapes or dtypes do not fit, or split_k < 1.
    """
    if a.dim() != 2 or a.shape[0] != 1:
        raise ValueError(f"need a single row a (1, K); got {tuple(a.shape)} (use a GEMM for M > 1)")
    if b.dim() != 2 or b.shape[1] != a.shape[1]:
        raise ValueError(f"need b (N, K) with K = {a.shape[1]}; got {tuple(b.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16, torch.float32) or b.dtype != a.dtype:
        raise ValueError(f"need matching bf16/fp16/fp32 a and b; got {a.dtype} and {b.dtype}")
    if split_k is not None and split_k < 1:
        raise ValueError(f"split_k must be >= 1, got {split_k}")
    n, k = b.shape
    if b.stride(1) != 1:
        b = b.contiguous()
    acc = torch.zeros((n,), dtype=torch.float32, device=a.device)  # atomics need zeros
    if n == 0 or k == 0:
        return torch.zeros((1, n), dtype=a.dtype, device=a.device)
    cfg = _launch_config(n, k)
    given = {"split_k": split_k, "block_n": block_n, "block_k": block_k, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    k_per_split = triton.cdiv(triton.cdiv(k, cfg["block_k"]), cfg["split_k"]) * cfg["block_k"]
    grid = (triton.cdiv(n, cfg["block_n"]), cfg["split_k"])
    _gemv_split_k_kernel[grid](
        a, b, acc,
        n, k, k_per_split,
        a.stride(1), b.stride(0),
        BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"], num_warps=cfg["num_warps"],
    )  # fmt: skip
    if a.dtype == torch.float32:
        return acc.view(1, n)
    c = torch.empty((1, n), dtype=a.dtype, device=a.device)
    _gemv_cast_kernel[(triton.cdiv(n, 1024),)](acc, c, n, BLOCK=1024)
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return a @ b^T computed in fp32 and cast to a's dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"n", "k"}``: a (1, K) ~ N(0, 1), b ~ N(0, 1) * K^-1/2."""
    n, k = shape["n"], shape["k"]
    return {
        "a": torch.randn(1, k, device=device).to(dtype),
        "b": (torch.randn(n, k, device=device) * k**-0.5).to(dtype),
    }
