"""
---
id: linear_sigmoid_mul_persistent
title: Linear sigmoid-mul on a persistent grouped-order grid, gate tile prefetched before the K loop
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tiled-tl-dot, persistent-grid, grouped-program-order, fused-epilogue,
  epilogue-prefetch, bias-epilogue, sigmoid-gate, fp32-accumulate, weight-layout-b]
status: reference
launcher: linear_sigmoid_mul_persistent
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  group_m: [8, 1, 16]
  programs_per_sm: [2, 1, 4]
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
prefill. A persistent grid of min(tiles, programs_per_sm * SMs) programs is launched once; program
p walks output tiles p, p + grid, ... in grouped order (GROUP_M row tiles share each column of W
tiles), so the tiles in flight at any moment form a compact band whose x rows and W rows stay in
L2. Per tile, the epilogue operands (the bias slice and the (BLOCK_M, BLOCK_N) tile of m) are
loaded before the tl.dot K loop rather than after it: their latency hides under the main loop, and
the epilogue (bias, sigmoid, multiply, bf16 store) runs straight out of registers; the store of
one tile then overlaps the next tile's first loads. Compared with linear_sigmoid_mul_fused (one
program per tile, m loaded after the loop) it pays launch and prologue once per SM and never waits
on m, at the cost of BLOCK_M * BLOCK_N more live fp32 registers during the loop (keep tiles at
64x64 or use num_warps 8 for 128x128). FLOPs 2 * T * N * H; bytes W and x once when the band fits
in L2, m and out once. Wins for prefill (T >= 256) with many tiles per SM; decode belongs to the
split-K or GEMV designs. Limits: a partial last wave when tiles % grid != 0 (no stream-K).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _lsm_persistent_kernel(
    x_ptr, w_ptr, b_ptr, m_ptr, out_ptr,
    T, N, H,
    stride_xt, stride_xh, stride_wn, stride_wh, stride_mt, stride_mn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):  # fmt: skip
    tiles_m = tl.cdiv(T, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    offs_k = tl.arange(0, BLOCK_K)
    for tile in range(tl.program_id(0), tiles_m * tiles_n, tl.num_programs(0)):
        first_m = (tile // per_group) * GROUP_M
        rows_in_group = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (tile % per_group) % rows_in_group
        pid_n = (tile % per_group) // rows_in_group
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m, mask_n = offs_m < T, offs_n < N
        mask = mask_m[:, None] & mask_n[None, :]
        rows = offs_m[:, None].to(tl.int64)

        # epilogue operands first: their loads overlap the main loop
        bias = tl.load(b_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        gate_mul = tl.load(m_ptr + rows * stride_mt + offs_n[None, :] * stride_mn, mask=mask,
                           other=0.0)  # fmt: skip

        x_ptrs = x_ptr + rows * stride_xt + offs_k[None, :] * stride_xh
        w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wh
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in range(0, H, BLOCK_K):
            mask_k = offs_k < H - k
            a = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            b = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            if UPCAST:  # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)
            x_ptrs += BLOCK_K * stride_xh
            w_ptrs += BLOCK_K * stride_wh

        gate = 1.0 / (1.0 + tl.exp(-(acc + bias[None, :])))
        out = (gate * gate_mul.to(tl.float32)).to(tl.bfloat16)
        tl.store(out_ptr + rows * N + offs_n[None, :], out, mask=mask)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def linear_sigmoid_mul_persistent(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    post_mul_mat: torch.Tensor,
    *,
    block_m: int = 64,
    block_n: int = 64,
    block_k: int = 64,
    group_m: int = 8,
    programs_per_sm: int = 2,
    num_warps: int = 4,
    num_stages: int = 3,
) -> torch.Tensor:
    """Return sigmoid(hidden_states @ weight^T + bias) * post_mul_mat in bf16, persistent grid.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, any strides.
        weight: (N, H) same dtype (a linear layer's weight), any strides.
        bias: (N,) same dtype.
        post_mul_mat: (T, N) same dtype, any strides.
        block_m: Token rows per tile (power of two >= 16).
        block_n: Output features per tile (power of two >= 16).
        block_k: H step of the inner loop (power of two >= 16).
        group_m: Row tiles per group of the grouped tile order (>= 1).
        programs_per_sm: Persistent programs per SM (grid = min(tiles, this * SMs)).
        num_warps: Warps per program.
        num_stages: Software-pipelining depth on the GPU.

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
    if group_m < 1 or programs_per_sm < 1:
        raise ValueError(
            f"group_m and programs_per_sm must be >= 1; got {group_m}, {programs_per_sm}"
        )
    out = torch.empty((t, n), dtype=torch.bfloat16, device=x.device)
    if out.numel() == 0:
        return out
    tiles = triton.cdiv(t, block_m) * triton.cdiv(n, block_n)
    _lsm_persistent_kernel[(min(tiles, programs_per_sm * _num_sms(x.device)),)](
        x, w, b.contiguous(), m, out,
        t, n, h,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), m.stride(0), m.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=group_m,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1",
        num_warps=num_warps, num_stages=num_stages,
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
