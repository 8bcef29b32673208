"""
---
id: linear_sigmoid_mul_split_k
title: Split-K linear sigmoid-mul, fp32 partial tiles per K slice then a sigmoid-mul epilogue kernel
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [tiled-tl-dot, split-k, fp32-partials-workspace, deterministic-reduction,
  epilogue-kernel, bias-epilogue, sigmoid-gate, fp32-accumulate, weight-layout-b]
status: reference
launcher: linear_sigmoid_mul_split_k
tuning:
  split_k: [4, 1, 2, 8, 16]
  block_m: [16, 32, 64]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  hidden_states: {shape: [T, H], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input]}
  weight: {shape: [N, H], like: hidden_states, layout: any, aliases: [w]}
  bias: {shape: [N], like: hidden_states}
  post_mul_mat: {shape: [T, N], like: hidden_states, layout: any, aliases: [gate]}
returns:
  - {name: out, shape: [T, N], dtype: bf16}
problem:
  shapes: [{token_count: 1, hidden_size: 160, out_features: 72}, {token_count: 7, hidden_size: 96, out_features: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
atrex30's linear_sigmoid_mul (out = sigmoid(x W^T + b) * m, fp32 math, one rounding to bf16) for
small T with large H, where the (T / BLOCK_M) * (N / BLOCK_N) output tiles are too few to stream
W at full bandwidth. Pass 1: program (i, j, s) of a 3-D grid runs the tl.dot K loop over the s-th
of split_k contiguous slices of H (each a whole number of BLOCK_K steps) for output tile (i, j) and
writes its fp32 (BLOCK_M, BLOCK_N) partial into a (split_k, T, N) workspace: split_k times more
programs stream W, and no atomics are used, so the result is deterministic run to run. Pass 2, one
program per (BLOCK_M, BLOCK_N) tile, sums the split_k partials in a fixed order, adds the bias,
applies sigmoid, multiplies by m's tile and stores bf16 (the logits exist only in the fp32
workspace, never rounded). Extra traffic: split_k * T * N * 8 B (write + read of the partials),
small next to W's N * H * 2 B when T * split_k << H / 4. FLOPs 2 * T * N * H. Wins for decode and
small prefill with H >= 2K (e.g. T = 16, N = 4096, H = 8192); with large T the workspace and the
second launch cost more than the idle SMs they recover (use linear_sigmoid_mul_fused). Limits: the
workspace is allocated per call (split_k * T * N * 4 B).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _split_k_partial_kernel(
    x_ptr, w_ptr, ws_ptr,
    T, N, H, K_PER_SPLIT,
    stride_xt, stride_xh, stride_wn, stride_wh,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_m, pid_n, split = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m, mask_n = offs_m < T, offs_n < N
    k_lo = split * K_PER_SPLIT
    k_hi = tl.minimum(k_lo + K_PER_SPLIT, H)
    offs_k = k_lo + tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xt + offs_k[None, :] * stride_xh
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wh
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(k_lo, k_hi, BLOCK_K):
        mask_k = offs_k < k_hi - (k - k_lo)
        a = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:  # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xh
        w_ptrs += BLOCK_K * stride_wh
    ws = ws_ptr + (split * T + offs_m[:, None]).to(tl.int64) * N + offs_n[None, :]
    tl.store(ws, acc, mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _split_k_epilogue_kernel(
    ws_ptr, b_ptr, m_ptr, out_ptr,
    T, N, SPLIT_K, stride_mt, stride_mn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m < T)[:, None] & (offs_n < N)[None, :]
    rows = offs_m[:, None].to(tl.int64)
    logits = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for s in range(SPLIT_K):  # fixed order: deterministic
        logits += tl.load(ws_ptr + (s * T + rows) * N + offs_n[None, :], mask=mask, other=0.0)
    logits += tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
    gate = 1.0 / (1.0 + tl.exp(-logits))
    mm = tl.load(m_ptr + rows * stride_mt + offs_n[None, :] * stride_mn, mask=mask, other=0.0)
    tl.store(out_ptr + rows * N + offs_n[None, :], (gate * mm.to(tl.float32)).to(tl.bfloat16),
             mask=mask)  # fmt: skip


def linear_sigmoid_mul_split_k(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    post_mul_mat: torch.Tensor,
    *,
    split_k: int = 4,
    block_m: int = 16,
    block_n: int = 64,
    block_k: int = 64,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """Return sigmoid(hidden_states @ weight^T + bias) * post_mul_mat in bf16, split over H.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, any strides.
        weight: (N, H) same dtype (a linear layer's weight), any strides.
        bias: (N,) same dtype.
        post_mul_mat: (T, N) same dtype, any strides.
        split_k: Slices of H computed by separate programs (>= 1; capped so none is empty).
        block_m: Token rows per tile (power of two >= 16).
        block_n: Output features per tile (power of two >= 16).
        block_k: H step of the inner loop (power of two >= 16).
        num_warps: Warps per program.
        num_stages: Software-pipelining depth of pass 1 on the GPU.

    Returns:
        out: (T, N) bf16, contiguous; all math in fp32, rounded once.

    Raises:
        ValueError: The shapes, dtypes or tuning values do not fit.
    """
    x, w, b, m = hidden_states, weight, bias, post_mul_mat
    if x.dim() != 2 or w.dim() != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(
            f"need hidden_states (T, H) and weight (N, H); got {tuple(x.shape)}, {tuple(w.shape)}"
        )
    t, h = x.shape
    n = w.shape[0]
    if b.shape != (n,) or m.shape != (t, n):
        raise ValueError(
            f"need bias ({n},) and post_mul_mat ({t}, {n}); got {tuple(b.shape)}, {tuple(m.shape)}"
        )
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32) or any(
        other.dtype != x.dtype for other in (w, b, m)
    ):
        raise ValueError(
            f"need bf16/fp16/fp32 inputs of one dtype; got hidden_states {x.dtype}, weight "
            f"{w.dtype}, bias {b.dtype}, post_mul_mat {m.dtype}"
        )
    for name, value in (("block_m", block_m), ("block_n", block_n), ("block_k", block_k)):
        if value < 16 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {value}")
    if split_k < 1:
        raise ValueError(f"split_k must be >= 1; got {split_k}")
    out = torch.empty((t, n), dtype=torch.bfloat16, device=x.device)
    if out.numel() == 0:
        return out
    steps = triton.cdiv(max(h, 1), block_k)
    split_k = min(split_k, steps)
    k_per_split = triton.cdiv(steps, split_k) * block_k  # whole BLOCK_K steps per slice
    split_k = triton.cdiv(max(h, 1), k_per_split)  # no empty slice
    ws = torch.empty((split_k, t, n), dtype=torch.float32, device=x.device)
    tiles = (triton.cdiv(t, block_m), triton.cdiv(n, block_n))
    _split_k_partial_kernel[(*tiles, split_k)](
        x, w, ws,
        t, n, h, k_per_split,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=num_warps, num_stages=num_stages,
    )  # fmt: skip
    _split_k_epilogue_kernel[tiles](
        ws, b.contiguous(), m, out,
        t, n, split_k, m.stride(0), m.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    post_mul_mat: torch.Tensor,
) -> torch.Tensor:
    """Return sigmoid(x W^T + b) * m in fp32, rounded to bf16 (the atrex30 reference)."""
    logits = hidden_states.float() @ weight.float().t() + bias.float()
    return (torch.sigmoid(logits) * post_mul_mat.float()).to(torch.bfloat16)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return the four operands for ``{"token_count", "hidden_size", "out_features"}``.

    The atrex30 draws: N(0, 1) activations and gated tensor, H^-0.5 weights, 0.02 bias.
    """
    t, h, n = shape["token_count"], shape["hidden_size"], shape["out_features"]
    return {
        "hidden_states": torch.randn(t, h, device=device).to(dtype),
        "weight": (torch.randn(n, h, device=device) * h**-0.5).to(dtype),
        "bias": (torch.randn(n, device=device) * 0.02).to(dtype),
        "post_mul_mat": torch.randn(t, n, device=device).to(dtype),
    }
