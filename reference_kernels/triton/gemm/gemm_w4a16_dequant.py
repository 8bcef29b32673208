"""
---
id: gemm_w4a16_dequant
title: W4A16 GEMM, packed int4 weights with group scales along K unpacked and scaled in the K loop
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, uint8]
bound: memory
techniques: [weight-only-quant, int4-nibble-unpack, group-scales, per-k-block-rescale,
  tiled-tl-dot, grouped-program-order, fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_w4a16_dequant
tuning:
  block_m: [16, 32, 64, 128]
  block_n: [64, 32, 128]
  block_k: [128, 32, 64]
  group_m: [8, 1]
  num_warps: [4, 2, 8]
  num_stages: [4, 3]
args:
  x: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [a, input, hidden_states]}
  w_packed: {shape: [N, K / 2], dtypes: [uint8], layout: any, aliases: [qweight, w, weight]}
  scales: {shape: [N, G], dtypes: [bf16, fp16, fp32], aliases: [w_scale, scale, weight_scale]}
returns:
  - {name: y, shape: [M, N], dtype: x}
problem:
  shapes: [{m: 5, n: 40, k: 256, group_size: 64}, {m: 1, n: 17, k: 96, group_size: 32}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
Weight-only int4 (GPTQ/AWQ-style symmetric, no zero tensor): y = x @ W^T with W[n, k] =
(q[n, k] - 8) * scales[n, k // group_size], q the 4-bit code packed two per byte in w_packed (N,
K/2) uint8 (even k in the low nibble, odd k in the high one), group_size = K / G. Each K step loads
a (BLOCK_N, BLOCK_K/2) byte tile, splits it into low and high nibbles with a mask and a shift,
interleaves them back to (BLOCK_N, BLOCK_K) codes, subtracts 8 and converts to the activation dtype
(integers -8..7 are exact in bf16), and feeds tl.dot. BLOCK_K divides the group, so the group
scale is one value per column within the step: it is applied to the step's fp32 partial product
(BLOCK_M x BLOCK_N multiplies) rather than to every weight (BLOCK_K x BLOCK_N), and the weights
are never rounded after scaling. Bytes: 0.5 per weight plus the scales (2/group_size per weight
in bf16) against 2 for bf16, so decode GEMMs (small M, bound by reading W) run up to about 3.5x
faster. Limits: K must be a multiple of group_size and group_size a multiple of 16; the unpack
costs ALU per weight per row tile, so at large M it is compute bound and loses to dequantising
once; no zero points (asymmetric AWQ needs one more subtraction); no split-K.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_w4a16_dequant_kernel(
    # pointers
    x_ptr,
    w_ptr,
    scale_ptr,
    y_ptr,
    # sizes
    M,
    N,
    K,
    GROUP_SIZE,
    # strides (elements; w in bytes)
    stride_xm,
    stride_xk,
    stride_wn,
    stride_wk,
    stride_sn,
    stride_sg,
    stride_ym,
    stride_yn,
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
    offs_byte = tl.arange(0, BLOCK_K // 2)
    mask_m = offs_m < M
    mask_n = offs_n < N
    x_ptrs = x_ptr + offs_m[:, None].to(tl.int64) * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + offs_n[:, None].to(tl.int64) * stride_wn + offs_byte[None, :] * stride_wk
    s_ptrs = scale_ptr + offs_n.to(tl.int64) * stride_sn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # K is a multiple of GROUP_SIZE, itself a multiple of BLOCK_K: no K masks
    for k_start in range(0, K, BLOCK_K):
        x = tl.load(x_ptrs, mask=mask_m[:, None], other=0.0)
        packed = tl.load(w_ptrs, mask=mask_n[:, None], other=0)  # (BLOCK_N, BLOCK_K / 2) bytes
        # low nibble = even k, high nibble = odd k; interleave restores the k order
        codes = tl.interleave(packed & 0xF, packed >> 4)  # (BLOCK_N, BLOCK_K)
        centred = codes.to(tl.int8) - 8  # symmetric int4: -8..7
        scale = tl.load(s_ptrs + (k_start // GROUP_SIZE) * stride_sg, mask=mask_n, other=0.0)
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            part = tl.dot(
                x.to(tl.float32), tl.trans(centred.to(tl.float32)), input_precision="ieee"
            )
        else:
            # the codes are exact in the activation dtype; 16-bit MMA with an fp32 result
            part = tl.dot(x, tl.trans(centred.to(x_ptr.dtype.element_ty)))
        acc += part * scale.to(tl.float32)[None, :]  # one group scale per column in this step
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += (BLOCK_K // 2) * stride_wk

    y_ptrs = y_ptr + offs_m[:, None].to(tl.int64) * stride_ym + offs_n[None, :] * stride_yn
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _launch_config(m: int) -> dict[str, int]:
    """Return tiles, group, warps and stages: short row tiles and long K steps for decode."""
    if m <= 16:
        return {"block_m": 16, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
                "num_stages": 4}  # fmt: skip
    if m <= 128:
        return {"block_m": 64, "block_n": 64, "block_k": 128, "group_m": 8, "num_warps": 4,
                "num_stages": 4}  # fmt: skip
    return {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8, "num_warps": 8,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _check(x: torch.Tensor, w_packed: torch.Tensor, scales: torch.Tensor) -> int:
    """Validate the operands; return the group size along K."""
    if x.dim() != 2 or w_packed.dim() != 2 or scales.dim() != 2:
        raise ValueError(
            f"need x (M, K), w_packed (N, K/2), scales (N, G); got {tuple(x.shape)}, "
            f"{tuple(w_packed.shape)}, {tuple(scales.shape)}"
        )
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need bf16/fp16/fp32 activations x; got {x.dtype}")
    if w_packed.dtype != torch.uint8 or not scales.is_floating_point():
        raise ValueError(
            f"need uint8 w_packed and float scales; got {w_packed.dtype}, {scales.dtype}"
        )
    k, n, groups = x.shape[1], w_packed.shape[0], scales.shape[1]
    if w_packed.shape[1] * 2 != k or scales.shape[0] != n:
        raise ValueError(
            f"w_packed must be (N, K/2) = (N, {k // 2}) and scales (N, G) with the same N; got "
            f"{tuple(w_packed.shape)} and {tuple(scales.shape)}"
        )
    if groups == 0 or k % groups or (k // groups) % 16:
        raise ValueError(
            f"scales has {groups} groups for K = {k}: K / G must be a whole multiple of 16"
        )
    return k // groups


def gemm_w4a16_dequant(
    x: torch.Tensor,
    w_packed: torch.Tensor,
    scales: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return y = x @ W^T with W dequantised from packed int4 codes inside the K loop.

    Args:
        x: (M, K) bf16/fp16/fp32 activations, any strides.
        w_packed: (N, K/2) uint8, two 4-bit codes per byte (even k low nibble), any strides.
        scales: (N, G) float group scales; group_size = K / G, a multiple of 16.
        block_m: Rows of y per program (power of two >= 16); None picks by M.
        block_n: Columns of y per program (power of two >= 16); None picks by M.
        block_k: K step (power of two >= 16); lowered until it divides group_size.
        group_m: Row tiles per group of the grouped program order; None = 8.
        num_warps: Warps per program; None picks by M.
        num_stages: Software-pipelining depth on the GPU; None picks by M.

    Returns:
        y: (M, N) in ``x``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes, dtypes or group size do not fit.
    """
    group_size = _check(x, w_packed, scales)
    m, k = x.shape
    n = w_packed.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0:
        return y
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    while group_size % cfg["block_k"]:  # one group scale per K step
        cfg["block_k"] //= 2
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_w4a16_dequant_kernel[grid](
        x, w_packed, scales, y,
        m, n, k, group_size,
        x.stride(0), x.stride(1),
        w_packed.stride(0), w_packed.stride(1),
        scales.stride(0), scales.stride(1),
        y.stride(0), y.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return y


def reference(x: torch.Tensor, w_packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """Return x @ W^T with W unpacked and scaled in fp32, cast to x's dtype."""
    n = w_packed.shape[0]
    codes = torch.stack([w_packed & 0xF, w_packed >> 4], dim=-1).reshape(n, -1)
    group_size = codes.shape[1] // scales.shape[1]
    weights = (codes.float() - 8.0) * scales.float().repeat_interleave(group_size, dim=1)
    return (x.float() @ weights.T).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "w_packed", "scales"}`` for ``{"m", "n", "k", "group_size"}``.

    x ~ N(0, 1) in ``dtype``; K^-0.5-scaled N(0, 1) weights quantised symmetrically per group
    (absmax mapped to 7), codes offset by 8 and packed two per byte; scales in ``dtype``.
    """
    m, n, k, group = shape["m"], shape["n"], shape["k"], shape["group_size"]
    weights = (torch.randn(n, k, device=device) * k**-0.5).view(n, k // group, group)
    scales = (weights.abs().amax(dim=-1).clamp_min(1e-8) / 7.0).to(dtype)
    codes = torch.round(weights / scales.float()[..., None]).clamp(-8, 7).to(torch.int32) + 8
    codes = codes.view(n, k).to(torch.uint8)
    return {
        "x": torch.randn(m, k, device=device).to(dtype),
        "w_packed": codes[:, 0::2] | (codes[:, 1::2] << 4),
        "scales": scales,
    }
