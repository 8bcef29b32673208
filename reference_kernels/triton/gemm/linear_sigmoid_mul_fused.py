"""
---
id: linear_sigmoid_mul_fused
title: Linear layer with a fused epilogue out = sigmoid(x W^T + b) * m, rounded once to bf16
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tiled-tl-dot, fused-epilogue, bias-epilogue, sigmoid-gate, grouped-program-order,
  fp32-accumulate, weight-layout-b]
status: reference
launcher: linear_sigmoid_mul_fused
tuning:
  block_m: [64, 16, 32, 128]
  block_n: [64, 32, 128]
  block_k: [64, 32, 128]
  group_m: [8, 1]
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
  shapes: [{token_count: 7, hidden_size: 96, out_features: 200}, {token_count: 1, hidden_size: 160, out_features: 72}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
The atrex30 operator linear_sigmoid_mul: out = sigmoid(x W^T + b) * m with x (T, H), W (N, H) in
the linear-layer weight layout, b (N,) and m (T, N); logits, sigmoid and product in fp32, one
rounding to bf16 at the store, exactly as the reference. Program (row tile, column tile) of a
grouped 1D grid runs the K loop over H with tl.dot into an fp32 accumulator, then in registers adds
the bias row, applies sigmoid, loads the matching (BLOCK_M, BLOCK_N) tile of m and multiplies, so
the logits never reach memory: unfused, the GEMM writes T*N logits and the epilogue reads them back
with m (4 extra bytes per output element in bf16, doubling the traffic of a decode step where
the GEMM itself is a weight-streaming GEMV). FLOPs 2*T*N*H plus about 6 per output; bytes W once,
x per column tile from L2, m and out once. Limits: no split-K, so with T <= 16 only cdiv(N,
BLOCK_N) programs stream W and a small N leaves SMs idle; the output is bf16 whatever the input
dtype (the operator's contract).
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _linear_sigmoid_mul_fused_kernel(
    # pointers
    x_ptr,
    w_ptr,
    bias_ptr,
    m_ptr,
    out_ptr,
    # sizes
    T,
    N,
    H,
    # strides (elements)
    stride_xt,
    stride_xh,
    stride_wn,
    stride_wh,
    stride_mt,
    stride_mn,
    stride_ot,
    stride_on,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(T, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < T
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xt + offs_k[None, :] * stride_xh
    w_ptrs = w_ptr + offs_n[None, :].to(tl.int64) * stride_wn + offs_k[:, None] * stride_wh

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, H, BLOCK_K):
        mask_k = offs_k < H - k_start
        x = tl.load(x_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(x, w, acc)  # bf16 products are exact in the fp32 accumulator
        x_ptrs += BLOCK_K * stride_xh
        w_ptrs += BLOCK_K * stride_wh

    # fused epilogue in fp32: + bias, sigmoid, * post_mul_mat, one rounding to bf16
    mask_c = mask_m[:, None] & mask_n[None, :]
    bias = tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    gate = tl.sigmoid(acc + bias[None, :])
    m_ptrs = m_ptr + offs_m[:, None].to(tl.int64) * stride_mt + offs_n[None, :] * stride_mn
    mul = tl.load(m_ptrs, mask=mask_c, other=0.0).to(tl.float32)
    out_ptrs = out_ptr + offs_m[:, None].to(tl.int64) * stride_ot + offs_n[None, :] * stride_on
    tl.store(out_ptrs, (gate * mul).to(out_ptr.dtype.element_ty), mask=mask_c)


def _launch_config(t: int) -> dict[str, int]:
    """Return tiles, group, warps and stages: a short row tile for decode-sized token counts."""
    if t <= 16:
        return {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
                "num_stages": 4}  # fmt: skip
    if t <= 64:
        return {"block_m": 64, "block_n": 64, "block_k": 64, "group_m": 8, "num_warps": 4,
                "num_stages": 3}  # fmt: skip
    return {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def linear_sigmoid_mul_fused(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    post_mul_mat: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return sigmoid(hidden_states @ weight^T + bias) * post_mul_mat in bf16.

    Args:
        hidden_states: (T, H) bf16/fp16/fp32, any strides.
        weight: (N, H) same dtype (a linear layer's weight), any strides.
        bias: (N,) same dtype.
        post_mul_mat: (T, N) same dtype, any strides; multiplies the gate.
        block_m: Token rows per program (power of two >= 16); None picks by T.
        block_n: Output features per program (power of two >= 16); None picks by T.
        block_k: H step of the inner loop (power of two >= 16); None picks by T.
        group_m: Row tiles per group of the grouped program order; None = 8.
        num_warps: Warps per program; None picks by T.
        num_stages: Software-pipelining depth on the GPU; None picks by T.

    Returns:
        out: (T, N) bf16, contiguous; all math in fp32, rounded once.

    Raises:
        ValueError: The shapes or dtypes do not fit.
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
    out = torch.empty((t, n), dtype=torch.bfloat16, device=x.device)
    if out.numel() == 0:
        return out
    cfg = _launch_config(t)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(t, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _linear_sigmoid_mul_fused_kernel[grid](
        x, w, b.contiguous(), m, out,
        t, n, h,
        x.stride(0), x.stride(1),
        w.stride(0), w.stride(1),
        m.stride(0), m.stride(1),
        out.stride(0), out.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
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
