"""
---
id: linear_sigmoid_mul_gemv_decode
title: Decode linear sigmoid-mul without tl.dot, CUDA-core dot products over a weight tile per step
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [gemv, cuda-core-dot, no-tensor-cores, weight-tile-reuse-across-rows, fused-epilogue,
  bias-epilogue, sigmoid-gate, fp32-accumulate, weight-layout-b]
status: reference
launcher: linear_sigmoid_mul_gemv_decode
tuning:
  block_n: [64, 16, 128]
  block_k: [64, 32, 128]
  block_m: [16, 1, 4]
  num_warps: [4, 1, 8]
args:
  hidden_states: {shape: [T, H], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input]}
  weight: {shape: [N, H], like: hidden_states, aliases: [w]}
  bias: {shape: [N], like: hidden_states}
  post_mul_mat: {shape: [T, N], like: hidden_states, layout: any, aliases: [gate]}
returns:
  - {name: out, shape: [T, N], dtype: bf16}
problem:
  shapes: [{token_count: 1, hidden_size: 160, out_features: 72}, {token_count: 7, hidden_size: 96, out_features: 200}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30's linear_sigmoid_mul (out = sigmoid(x W^T + b) * m, all in fp32, one rounding to bf16) for
decode steps, T <= 16 tokens. At such T a tl.dot tile is mostly padding (the MMA needs M >= 16) and
the step is a weight-streaming GEMV: the time is N * H * 2 B of W read once. Program (j, i) owns
BLOCK_N output features and up to BLOCK_M tokens; each step of the H loop loads one (BLOCK_N,
BLOCK_K) tile of W (rows of the (N, H) layout, contiguous along H: coalesced, 16-B vectors) and,
for each of the tile's tokens, a BLOCK_K slice of x, then forms the BLOCK_N dot-product partials
as an elementwise multiply and a row reduction on the CUDA cores in fp32 (no tensor cores, so
bf16, fp16 and fp32 share one exact-fp32 path); the W tile in registers serves every token, so W
is read once per token block. The epilogue adds the bias, applies sigmoid, multiplies by m's tile
and stores bf16. Grid cdiv(N, BLOCK_N) * cdiv(T, BLOCK_M): N = 4096 with BLOCK_N = 64 gives 64
programs, enough to stream W on a mid-size GPU (use smaller block_n on big ones). FLOPs 2 * T * N
* H at CUDA-core rate: fine for T <= 16 (under the memory time on H100 for bf16), wasteful beyond;
larger T re-reads W per token block and belongs to linear_sigmoid_mul_fused.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _linear_sigmoid_mul_gemv_kernel(
    x_ptr, w_ptr, b_ptr, m_ptr, out_ptr,
    T, N, H,
    stride_xt, stride_xh, stride_wn, stride_mt, stride_mn,
    BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_M: tl.constexpr,
):  # fmt: skip
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    row0 = tl.program_id(1) * BLOCK_M
    rows = row0 + tl.arange(0, BLOCK_M)
    mn = cols < N
    kk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        k = k0 + kk
        mk = k < H
        w = tl.load(
            w_ptr + cols[:, None].to(tl.int64) * stride_wn + k[None, :],
            mask=mn[:, None] & mk[None, :],
            other=0.0,
        ).to(tl.float32)  # (BLOCK_N, BLOCK_K), reused by every token of the block
        for r in tl.static_range(BLOCK_M):
            x = tl.load(
                x_ptr + (row0 + r).to(tl.int64) * stride_xt + k * stride_xh,
                mask=mk & (row0 + r < T),
                other=0.0,
            ).to(tl.float32)
            part = tl.sum(w * x[None, :], axis=1)  # (BLOCK_N,) CUDA-core dot products
            acc = tl.where((rows == row0 + r)[:, None], acc + part[None, :], acc)

    # epilogue: bias, sigmoid, times post_mul_mat, one rounding to bf16
    b = tl.load(b_ptr + cols, mask=mn, other=0.0).to(tl.float32)
    logits = acc + b[None, :]
    gate = 1.0 / (1.0 + tl.exp(-logits))
    mask = (rows < T)[:, None] & mn[None, :]
    r64 = rows[:, None].to(tl.int64)
    mm = tl.load(m_ptr + r64 * stride_mt + cols[None, :] * stride_mn, mask=mask, other=0.0)
    out = gate * mm.to(tl.float32)
    tl.store(out_ptr + r64 * N + cols[None, :], out.to(tl.bfloat16), mask=mask)


def linear_sigmoid_mul_gemv_decode(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    post_mul_mat: torch.Tensor,
    *,
    block_n: int = 64,
    block_k: int = 64,
    block_m: int = 16,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return sigmoid(hidden_states @ weight^T + bias) * post_mul_mat in bf16, GEMV style.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, any strides (T <= 16 is the target).
        weight: (N, H) same dtype, rows contiguous (a linear layer's weight).
        bias: (N,) same dtype.
        post_mul_mat: (T, N) same dtype, any strides.
        block_n: Output features per program (power of two).
        block_k: H step of the inner loop (power of two).
        block_m: Tokens per program sharing each weight tile (power of two).
        num_warps: Warps per program.

    Returns:
        out: (T, N) bf16, contiguous; all math in fp32, rounded once.

    Raises:
        ValueError: The shapes, dtypes, weight layout or block sizes do not fit.
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
    for name, value in (("block_n", block_n), ("block_k", block_k), ("block_m", block_m)):
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    if w.stride(1) != 1:
        w = w.contiguous()
    out = torch.empty((t, n), dtype=torch.bfloat16, device=x.device)
    if out.numel() == 0:
        return out
    grid = (triton.cdiv(n, block_n), triton.cdiv(t, block_m))
    _linear_sigmoid_mul_gemv_kernel[grid](
        x, w, b.contiguous(), m, out,
        t, n, h,
        x.stride(0), x.stride(1), w.stride(0), m.stride(0), m.stride(1),
        BLOCK_N=block_n, BLOCK_K=block_k, BLOCK_M=block_m, num_warps=num_warps,
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
