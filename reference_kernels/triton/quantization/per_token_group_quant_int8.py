"""
---
id: per_token_group_quant_int8
title: Per-token-group (1 x 128) int8 quantisation over flattened group rows, many groups a program
op_family: quantization
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int8]
bound: memory
techniques: [group-quant, flattened-groups, absmax-reduction, int8-symmetric, round-half-away]
status: reference
launcher: per_token_group_quant_int8
tuning:
  block_g: [16, 4, 8, 32, 64]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [T, N], dtypes: [bf16, fp16, fp32], aliases: [input, hidden_states]}
  group_size: {type: int, default: 128, aliases: [group, quant_group_size]}
returns:
  - {name: q, shape: [T, N], dtype: int8}
  - {name: scales, shape: [T, N / group_size], dtype: fp32}
problem:
  shapes: [{tokens: 3, hidden: 512, group_size: 64}, {tokens: 9, hidden: 128, group_size: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Fine-grained symmetric int8 activation quantisation (the int8 counterpart of DeepSeek-style 1 x 128
FP8 groups, used by block-int8 W8A8 GEMMs): per (token, group of G columns), scale = max(absmax,
1e-10) / 127 and q = round(x / scale) half away from zero, clamped to [-127, 127]. A contiguous (T,
N) input with N % G == 0 is, in memory, a (T * N / G, G) matrix of group rows, and so is the (T, N /
G) scale matrix a vector of T * N / G scales: program i owns BLOCK_G consecutive group rows of that
flat view, whatever tokens they belong to, as one (BLOCK_G, G) tile (one load, a row max, one store,
one vector store of BLOCK_G scales). The grid is cdiv(T * N / G, BLOCK_G), so decode (T = 1) and
prefill fill the GPU the same way, with no per-token or per-group grid axis. Bytes per bf16 element:
2 read + 1 written, plus 4 per group. Limits: x must be contiguous and N a multiple of a
power-of-two G; no asymmetric mode; on the GPU fp32 division is approximate, so a value within an
ulp of a rounding boundary may land one code away from a CPU reference.
"""

import torch
import triton
import triton.language as tl

INT8_MAX = 127.0
MIN_ABSMAX = 1e-10  # keeps all-zero groups finite
_INT8_MAX = tl.constexpr(INT8_MAX)  # a jit function may read only constexpr globals
_MIN_ABSMAX = tl.constexpr(MIN_ABSMAX)


@triton.jit
def _per_token_group_quant_int8_kernel(
    # pointers (all contiguous, seen as flat group rows)
    x_ptr,
    q_ptr,
    scale_ptr,
    # sizes
    NUM_ROWS,  # T * N / G
    # meta
    GROUP: tl.constexpr,
    BLOCK_G: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_G + tl.arange(0, BLOCK_G)
    row_mask = rows < NUM_ROWS
    offs = rows.to(tl.int64)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]

    x = tl.load(x_ptr + offs, mask=row_mask[:, None], other=0.0).to(tl.float32)
    scale = tl.math.div_rn(tl.maximum(tl.max(tl.abs(x), axis=1), _MIN_ABSMAX), _INT8_MAX)  # (BLOCK_G,)
    y = tl.math.div_rn(x, scale[:, None])  # IEEE division: GPU `/` may be 2 ulp off
    r = tl.minimum(tl.floor(tl.abs(y) + 0.5), _INT8_MAX)  # round half away from zero
    q = tl.where(y < 0, -r, r)

    tl.store(q_ptr + offs, q.to(tl.int8), mask=row_mask[:, None])
    tl.store(scale_ptr + rows, scale, mask=row_mask)


def per_token_group_quant_int8(
    x: torch.Tensor,
    group_size: int = 128,
    *,
    block_g: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise x to int8 with one symmetric scale per (token, group of group_size columns).

    Args:
        x: (T, N) bf16/fp16/fp32, contiguous, N a multiple of group_size.
        group_size: Columns per group (a power of two), 128 by default.
        block_g: Group rows per program (power of two); None = 16, fewer for tiny inputs.
        num_warps: Warps per program; None = 4.

    Returns:
        (q, scales): q (T, N) int8; scales (T, N / group_size) fp32, with
        x[:, g*G:(g+1)*G] ~ q[...] * scales[:, g:g+1].

    Raises:
        ValueError: x is not a contiguous 2D tensor, group_size is not a power of two dividing N,
            or block_g is not a power of two.
    """
    if x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"need a contiguous x (T, N); got shape {tuple(x.shape)}")
    if group_size <= 0 or group_size & (group_size - 1) or x.shape[1] % group_size:
        raise ValueError(
            f"group_size must be a power of two dividing N = {x.shape[1]}; got {group_size}"
        )
    t, n = x.shape
    num_rows = t * (n // group_size)
    bg = block_g or max(1, min(16, triton.next_power_of_2(max(num_rows, 1))))
    if bg & (bg - 1):
        raise ValueError(f"block_g must be a power of two; got {bg}")
    q = torch.empty((t, n), dtype=torch.int8, device=x.device)
    scales = torch.empty((t, n // group_size), dtype=torch.float32, device=x.device)
    if num_rows == 0:
        return q, scales
    _per_token_group_quant_int8_kernel[(triton.cdiv(num_rows, bg),)](
        x, q, scales, num_rows, GROUP=group_size, BLOCK_G=bg, num_warps=num_warps or 4
    )
    return q, scales


def reference(x: torch.Tensor, group_size: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (q, scales) in fp32 PyTorch with the same rounding (half away from zero)."""
    t, n = x.shape
    blocks = x.float().view(t, n // group_size, group_size)
    absmax = blocks.abs().amax(dim=-1).clamp(min=MIN_ABSMAX)
    scales = absmax / absmax.new_tensor(INT8_MAX)  # a device tensor: CUDA torch turns `/ float` into `* (1 / float)`, 1 ulp off IEEE division
    y = blocks / scales[..., None]
    q = torch.sign(y) * torch.floor(y.abs() + 0.5).clamp(max=INT8_MAX)
    return q.view(t, n).to(torch.int8), scales


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"tokens", "hidden"}`` (+ ``"group_size"``): x ~ N(0, 1) in ``dtype``."""
    x = torch.randn(shape["tokens"], shape["hidden"], device=device).to(dtype)
    return {"x": x, "group_size": shape.get("group_size", 128)}
