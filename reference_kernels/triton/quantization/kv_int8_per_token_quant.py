"""
---
id: kv_int8_per_token_quant
title: Int8 quantisation of new K and V rows, one fp32 scale per (token, head), both in one launch
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [per-head-scale, absmax-reduction, int8-symmetric, round-half-away, fused-k-and-v, head-tile]
status: reference
launcher: kv_int8_per_token_quant
tuning:
  block_h: [8, 1, 2, 4, 16, 32]
  num_warps: [4, 1, 2, 8]
args:
  key: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], aliases: [k]}
  value: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], aliases: [v]}
returns:
  - {name: key_q, shape: [T, H, D], dtype: int8}
  - {name: value_q, shape: [T, H, D], dtype: int8}
  - {name: key_scale, shape: [T, H], dtype: fp32}
  - {name: value_scale, shape: [T, H], dtype: fp32}
problem:
  shapes: [{tokens: 3, heads: 5, head_dim: 128}, {tokens: 1, heads: 8, head_dim: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Quantises the K and V rows of new tokens before they go into an int8 KV cache: every (token, head)
row of D values gets scale = max(absmax(row), 1e-10) / 127 and q = round(x / scale), rounded half
away from zero and clamped to [-127, 127]. Per-head scales keep one outlier head from flattening the
others (a per-token scale over H * D would). Program t owns token t: it walks the H heads in groups
of BLOCK_H, each group one (BLOCK_H, next_pow2(D)) tile of K and one of V, so both tensors are
quantised in the same launch from the same addresses and the two loads are in flight together.
Bytes per bf16 element: 2 read + 1 written, plus 8 per head for the two scales. Wins for decode and
prefill writes alike (T from 1 to thousands, any H); fusing K and V halves the launches of the
per-tensor form. Limits: D <= 1024 (one row tile); the cache scatter (slot mapping) is left to the
cache-write kernel; on the GPU fp32 division is approximate, so a value within an ulp of a rounding
boundary may land one code away from a CPU reference.
"""

import torch
import triton
import triton.language as tl

INT8_MAX = 127.0
MIN_ABSMAX = 1e-10  # keeps all-zero rows finite
_INT8_MAX = tl.constexpr(INT8_MAX)  # a jit function may read only constexpr globals
_MIN_ABSMAX = tl.constexpr(MIN_ABSMAX)
MAX_D = 1024


@triton.jit
def _quant_tile(src_ptr, dst_ptr, scale_ptr, offs, heads, mask, h_mask):
    """Quantise one (BLOCK_H, BLOCK_D) tile to int8 and store its per-row scales."""
    x = tl.load(src_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), _MIN_ABSMAX), _INT8_MAX)
    y = tl.math.div_rn(x, scale[:, None])  # IEEE division: GPU `/` may be 2 ulp off
    r = tl.minimum(tl.floor(tl.abs(y) + 0.5), _INT8_MAX)  # round half away from zero
    tl.store(dst_ptr + offs, tl.where(y < 0, -r, r).to(tl.int8), mask=mask)
    tl.store(scale_ptr + heads, scale, mask=h_mask)


@triton.jit
def _kv_int8_quant_kernel(
    # pointers
    k_ptr,
    v_ptr,
    kq_ptr,
    vq_ptr,
    ks_ptr,
    vs_ptr,
    # sizes
    H,
    D,
    # meta
    BLOCK_H: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)  # int64: t * H * D may pass 2^31
    offs_d = tl.arange(0, BLOCK_D)
    for h0 in range(0, H, BLOCK_H):
        heads = h0 + tl.arange(0, BLOCK_H)
        h_mask = heads < H
        mask = h_mask[:, None] & (offs_d < D)[None, :]
        offs = (t * H + heads)[:, None] * D + offs_d[None, :]  # contiguous (T, H, D)
        _quant_tile(k_ptr, kq_ptr, ks_ptr + t * H, offs, heads, mask, h_mask)
        _quant_tile(v_ptr, vq_ptr, vs_ptr + t * H, offs, heads, mask, h_mask)


def kv_int8_per_token_quant(
    key: torch.Tensor,
    value: torch.Tensor,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Quantise K and V to int8 with one fp32 scale per (token, head).

    Args:
        key: (T, H, D) bf16/fp16/fp32, D <= 1024.
        value: same shape and dtype as ``key``.
        block_h: Heads per tile (a power of two); None fills a ~2048-element tile.
        num_warps: Warps per program; None = 4.

    Returns:
        (key_q, value_q, key_scale, value_scale): int8 (T, H, D) twice, fp32 (T, H) twice, with
        key ~ key_q * key_scale[..., None].

    Raises:
        ValueError: Shapes or dtypes differ, not 3-D, D > 1024 or a bad block_h.
    """
    if key.dim() != 3 or key.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"key must be (T, H, D) bf16/fp16/fp32; got {tuple(key.shape)} {key.dtype}"
        )
    if value.shape != key.shape or value.dtype != key.dtype:
        raise ValueError(
            f"value must match key {tuple(key.shape)} {key.dtype}; "
            f"got {tuple(value.shape)} {value.dtype}"
        )
    t, h, d = key.shape
    if d > MAX_D:
        raise ValueError(f"head_dim {d} > {MAX_D}")
    block_d = triton.next_power_of_2(max(d, 1))
    if block_h is None:
        block_h = max(1, min(triton.next_power_of_2(max(h, 1)), 2048 // block_d))
    if block_h < 1 or block_h & (block_h - 1):
        raise ValueError(f"block_h must be a power of two; got {block_h}")
    key, value = key.contiguous(), value.contiguous()
    key_q = torch.empty((t, h, d), dtype=torch.int8, device=key.device)
    value_q = torch.empty_like(key_q)
    key_scale = torch.empty((t, h), dtype=torch.float32, device=key.device)
    value_scale = torch.empty_like(key_scale)
    if key.numel() == 0:
        return key_q, value_q, key_scale, value_scale
    _kv_int8_quant_kernel[(t,)](
        key, value, key_q, value_q, key_scale, value_scale,
        h, d,
        BLOCK_H=block_h, BLOCK_D=block_d, num_warps=num_warps or 4,
    )  # fmt: skip
    return key_q, value_q, key_scale, value_scale


def _quant_ref(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    xf = x.float()
    absmax = xf.abs().amax(dim=-1).clamp(min=MIN_ABSMAX)
    scale = absmax / absmax.new_tensor(INT8_MAX)  # a device tensor: CUDA torch turns `/ float` into `* (1 / float)`, 1 ulp off IEEE division
    y = xf / scale[..., None]
    q = torch.sign(y) * torch.floor(y.abs() + 0.5).clamp(max=INT8_MAX)
    return q.to(torch.int8), scale


def reference(
    key: torch.Tensor, value: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the same four tensors in fp32 PyTorch with the same rounding."""
    kq, ks = _quant_ref(key)
    vq, vs = _quant_ref(value)
    return kq, vq, ks, vs


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"key", "value"}`` for ``shape = {"tokens", "heads", "head_dim"}``; one hot head."""
    size = (shape["tokens"], shape["heads"], shape["head_dim"])
    key = torch.randn(size, device=device)
    key[:, 0] *= 20.0  # an outlier head: its scale must not leak into the others
    return {"key": key.to(dtype), "value": torch.randn(size, device=device).to(dtype)}
