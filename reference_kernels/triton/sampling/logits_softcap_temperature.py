"""
---
id: logits_softcap_temperature
title: Logit soft-capping, per-row temperature and an optional vocab mask in one elementwise pass
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [2d-tiles, fused-elementwise, stable-tanh, per-row-scalar, optional-mask, fp32-output]
status: reference
launcher: logits_softcap_temperature
tuning:
  block_v: [2048, 512, 1024, 4096]
  num_warps: [4, 1, 2, 8]
args:
  logits: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [x, scores]}
  temperature: {shape: [T], dtypes: [fp32], aliases: [temperatures, temp]}
  softcap: {type: float, default: 30.0, aliases: [final_logit_softcapping, logit_softcap, cap]}
  vocab_mask: {shape: [V], dtypes: [bool], optional: true, aliases: [allowed_mask, token_mask]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 1000}, {rows: 2, vocab: 77, softcap: 0.0, masked: false}]
  dtypes: [fp32, bf16]
  atol: 0.01
  rtol: 0.01
measured: []
---
The per-step logit pre-processing of a sampler, fused: y = softcap * tanh(x / softcap) (Gemma-2/3
final-logit soft-capping; softcap <= 0 skips it), then y / temperature[t] (per request; rows with
temperature <= 0 are greedy and left unscaled, as vLLM does), then y = -inf where vocab_mask is
False (grammar / allowed-token constraints; None keeps all). Output is fp32 whatever the input
dtype, because the sampler's softmax follows. Program (t, j) owns BLOCK_V logits of row t and loads
the row's temperature once; tanh is computed stably as sign(u) (1 - e) / (1 + e) with e = exp(-2
|u|) (never overflows, exact sign, absolute error ~1e-7). Bytes per logit: 2-4 read + 4 written + 1
for the mask (an L2 hit across rows); ~8 FLOPs, so copy bandwidth bounds it. Limits: separate
launches remain for penalties and top-k/top-p (those need whole-row passes); the mask is one (V,)
vector shared by all rows (a per-row bitmask would need a (T, V / 32) input).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _logits_softcap_temperature_kernel(
    # pointers
    x_ptr,
    temp_ptr,
    mask_ptr,
    out_ptr,
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_xt,
    stride_ot,
    # scalars
    softcap,
    # meta
    HAS_CAP: tl.constexpr,
    HAS_MASK: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = cols < V
    y = tl.load(x_ptr + row * stride_xt + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_CAP:
        u = y / softcap
        e = tl.exp(-2.0 * tl.abs(u))  # in (0, 1]: no overflow
        t = (1.0 - e) / (1.0 + e)
        y = softcap * tl.where(u < 0, -t, t)
    temp = tl.load(temp_ptr + row)
    y = y / tl.where(temp > 0, temp, 1.0)  # greedy rows (temperature <= 0) stay unscaled
    if HAS_MASK:
        allowed = tl.load(mask_ptr + cols, mask=mask, other=0)
        y = tl.where(allowed != 0, y, float("-inf"))
    tl.store(out_ptr + row * stride_ot + cols, y, mask=mask)


def logits_softcap_temperature(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    softcap: float = 30.0,
    vocab_mask: torch.Tensor | None = None,
    *,
    block_v: int = 2048,
    num_warps: int = 4,
) -> torch.Tensor:
    """Return softcap * tanh(logits / softcap) / temperature in fp32, -inf outside vocab_mask.

    Args:
        logits: (T, V) bf16/fp16/fp32, last dimension contiguous.
        temperature: (T,) fp32; rows with temperature <= 0 are not scaled (greedy).
        softcap: The cap; <= 0 disables soft-capping.
        vocab_mask: Optional (V,) bool, True = allowed; None allows all.
        block_v: Logits per program (power of two).
        num_warps: Warps per program.

    Returns:
        out: (T, V) fp32, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit, or block_v is not a power of two.
    """
    if logits.dim() != 2 or not logits.is_floating_point():
        raise ValueError(f"logits must be (T, V) float; got {tuple(logits.shape)} {logits.dtype}")
    t, v = logits.shape
    if tuple(temperature.shape) != (t,) or temperature.dtype != torch.float32:
        raise ValueError(
            f"temperature must be ({t},) fp32; got {tuple(temperature.shape)} {temperature.dtype}"
        )
    bad_mask = vocab_mask is not None and (
        tuple(vocab_mask.shape) != (v,) or vocab_mask.dtype != torch.bool
    )
    if bad_mask:
        raise ValueError(
            f"vocab_mask must be ({v},) bool; got {tuple(vocab_mask.shape)} {vocab_mask.dtype}"
        )
    if block_v < 1 or block_v & (block_v - 1):
        raise ValueError(f"block_v must be a power of two; got {block_v}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    out = torch.empty((t, v), dtype=torch.float32, device=x.device)
    if out.numel() == 0:
        return out
    mask = vocab_mask.contiguous() if vocab_mask is not None else out  # dummy when unused
    _logits_softcap_temperature_kernel[(t, triton.cdiv(v, block_v))](
        x, temperature, mask, out,
        v,
        x.stride(0), out.stride(0),
        float(softcap),
        HAS_CAP=softcap > 0, HAS_MASK=vocab_mask is not None,
        BLOCK_V=block_v, num_warps=num_warps,
    )  # fmt: skip
    return out


def reference(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    softcap: float = 30.0,
    vocab_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Return the same transform with torch.tanh, in fp32."""
    y = logits.float()
    if softcap > 0:
        y = softcap * torch.tanh(y / softcap)
    temp = temperature[:, None]
    y = y / torch.where(temp > 0, temp, torch.ones_like(temp))
    if vocab_mask is not None:
        y = y.masked_fill(~vocab_mask, float("-inf"))
    return y


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``{"rows", "vocab"}`` (+ ``"softcap"``, ``"masked"``).

    logits ~ N(0, 1) * 20 (the cap bites); temperatures in [0.5, 1.5] with row 0 greedy (0).
    """
    t, v = shape["rows"], shape["vocab"]
    logits = (torch.randn(t, v, device=device) * 20).to(dtype)
    temperature = 0.5 + torch.rand(t, device=device)
    temperature[0] = 0.0
    mask = torch.rand(v, device=device) > 0.3 if shape.get("masked", True) else None
    return {"logits": logits, "temperature": temperature,
            "softcap": shape.get("softcap", 30.0), "vocab_mask": mask}  # fmt: skip
