"""
---
id: gemm_bias_gelu_epilogue
title: GEMM C = gelu_tanh(A @ B^T + bias) with bias and tanh-GELU fused into the epilogue
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tiled-tl-dot, fused-epilogue, bias-epilogue, gelu-tanh-as-sigmoid,
  grouped-program-order, fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_bias_gelu_epilogue
tuning:
  block_m: [64, 32, 128]
  block_n: [64, 32, 128]
  block_k: [32, 16, 64]
  group_m: [8, 1]
  num_warps: [4, 2, 8]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, hidden_states]}
  b: {shape: [N, K], like: a, layout: any, aliases: [w, weight]}
  bias: {shape: [N], like: a, optional: true}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 33, n: 40, k: 72}, {m: 1, n: 17, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
The first linear of a GELU MLP (GPT-2, Gemma, ViT): C = gelu_tanh(A @ B^T + bias) with B in the
(N, K) weight layout and an optional bias. Program (row tile, column tile) of a grouped 1D grid
runs the K loop with tl.dot into an fp32 accumulator; the epilogue adds the bias row and applies
GELU's tanh form in fp32 registers, rewritten without tanh: 0.5 * (1 + tanh(u)) = sigmoid(2u), so
gelu(z) = z * sigmoid(2 * sqrt(2/pi) * (z + 0.044715 z^3)), one exp and one division per element.
It rounds once to the input dtype at the store. Unfused, the pre-activation makes a round trip
through HBM (4 bytes per output element in bf16, 8 in fp32), which matters when K is small
relative to N (the bytes of C rival those of A and B). FLOPs 2*M*N*K plus about 9 per output.
Limits: the exact erf GELU differs from the tanh form by up to about 1e-3 absolute (use the
erf form where a model needs it); no split-K for small M; no persistent scheduling.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_bias_gelu_epilogue_kernel(
    # pointers
    a_ptr,
    b_ptr,
    bias_ptr,
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
    HAS_BIAS: tl.constexpr,
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
    b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        mask_k = offs_k < K - k_start
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)  # bf16/fp16 MMA (TF32 for fp32) into fp32
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    # fused epilogue in fp32: + bias, then gelu_tanh(z) = z * sigmoid(2 * sqrt(2/pi) * (z + c z^3))
    if HAS_BIAS:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0).to(tl.float32)[None, :]
    inner = 1.5957691216057308 * (acc + 0.044715 * acc * acc * acc)  # 2 * sqrt(2 / pi) * (...)
    out = acc * tl.sigmoid(inner)
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles, group, warps and stages: 128x128 tiles for big problems, 64x64 otherwise."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 32, "group_m": 8, "num_warps": 8,
                "num_stages": 3}  # fmt: skip
    return {"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_bias_gelu_epilogue(
    a: torch.Tensor,
    b: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = gelu_tanh(A @ B^T + bias).

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        b: (N, K) same dtype as ``a`` (a linear layer's weight layout), any strides.
        bias: (N,) same dtype as ``a``, or None for no bias.
        block_m: Rows of C per program (power of two >= 16); None picks by size.
        block_n: Columns of C per program (power of two >= 16); None picks by size.
        block_k: K step of the inner loop (power of two >= 16); None picks by size.
        group_m: Row tiles per group of the grouped program order; None = 8.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None picks by size.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous; the epilogue runs in fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need matching bf16/fp16/fp32 inputs; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if bias is not None and (bias.shape != (n,) or bias.dtype != a.dtype):
        raise ValueError(
            f"bias must be ({n},) {a.dtype} to match B {tuple(b.shape)}; got "
            f"{tuple(bias.shape)} {bias.dtype}"
        )
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_bias_gelu_epilogue_kernel[grid](
        a, b, c if bias is None else bias.contiguous(), c,  # bias pointer unused without bias
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        HAS_BIAS=bias is not None,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Return gelu_tanh(A @ B^T + bias) computed in fp32 and cast to A's dtype."""
    z = a.float() @ b.float().T
    if bias is not None:
        z = z + bias.float()
    return torch.nn.functional.gelu(z, approximate="tanh").to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b", "bias"}`` for ``{"m", "n", "k"}``: N(0, 1) A, K^-0.5 B, 0.1 bias."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return {
        "a": torch.randn(m, k, device=device).to(dtype),
        "b": (torch.randn(n, k, device=device) * k**-0.5).to(dtype),
        "bias": (torch.randn(n, device=device) * 0.1).to(dtype),
    }
