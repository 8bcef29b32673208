"""
---
id: gumbel_max_sample
title: Categorical sampling by Gumbel-max from given uniform noise, with a chunk-carried argmax
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, chunked-loop, gumbel-max-trick, fused-temperature, scalar-carry]
status: reference
launcher: gumbel_max_sample
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [x, scores]}
  uniform_noise: {shape: [T, V], dtypes: [fp32], aliases: [noise, u, uniform]}
  temperature: {type: float, default: 1.0, aliases: [temp, t]}
returns:
  - {name: next_tokens, shape: [T], dtype: int64}
problem:
  shapes: [{rows: 3, vocab: 1000}, {rows: 9, vocab: 64}]
  dtypes: [fp32, bf16]
measured: []
---
Samples one token per row from softmax(logits / temperature) without a softmax: with u uniform in
(0, 1) and g = -log(-log(u)) a standard Gumbel variate, argmax(logits / temperature + g) is
distributed exactly as the softmax (the Gumbel-max trick), so the kernel is deterministic given the
noise and needs no normalisation pass. One program per row walks the vocab in BLOCK_V chunks; each
chunk computes its perturbed scores in fp32, reduces them to (max, first index) with
tl.max(return_indices=True) and folds that pair into a scalar carry that only moves on a strictly
larger score (ties go to the lowest index, as torch.argmax). Bytes per logit: the logit (2 B in
bf16) plus 4 B of noise read once, 8 B written per row; two logs per logit are the only math, so it
streams at HBM speed. Limits: the caller draws the noise (a Philox tl.rand in the kernel would halve
the bytes but ties the sample to Triton's generator); u = 0 gives a score of -inf and u = 1 of +inf
(torch.rand never returns 1); temperature must be > 0 (use greedy_argmax_rowwise for T = 0); one
program per row, so few rows use few SMs; NaNs are not handled.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gumbel_max_sample_kernel(
    # pointers
    x_ptr,
    u_ptr,  # fp32 (T, V) uniform noise
    out_ptr,  # int64 (T,)
    # sizes
    V,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_um,
    # scalars
    inv_temperature,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    offs = tl.arange(0, BLOCK_V)

    best = tl.full((), float("-inf"), tl.float32)
    best_col = tl.zeros((), tl.int32)
    for start in range(0, V, BLOCK_V):
        cols = start + offs
        mask = cols < V
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        u = tl.load(u_ptr + row * stride_um + cols, mask=mask, other=0.5)
        score = x * inv_temperature - tl.log(-tl.log(u))  # fp32 Gumbel-perturbed logit
        score = tl.where(mask, score, float("-inf"))
        # chunk winner: tl.max breaks ties to the lowest lane
        chunk_best, chunk_lane = tl.max(score, axis=0, return_indices=True)
        better = chunk_best > best  # strict: an earlier chunk keeps a tie
        best = tl.where(better, chunk_best, best)
        best_col = tl.where(better, start + chunk_lane, best_col)
    tl.store(out_ptr + row, best_col.to(tl.int64))


def _launch_config(v: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_v = min(triton.next_power_of_2(v), 4096)
    return {"block_v": block_v, "num_warps": min(max(block_v // 256, 1), 16)}


def gumbel_max_sample(
    logits: torch.Tensor,
    uniform_noise: torch.Tensor,
    temperature: float = 1.0,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return one sampled token per row: argmax(logits / temperature - log(-log(noise))).

    Args:
        logits: (T, V) bf16/fp16/fp32, last dimension contiguous, V >= 1.
        uniform_noise: (T, V) fp32 uniform samples in [0, 1), e.g. ``torch.rand``.
        temperature: Softmax temperature, > 0.
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        next_tokens: (T,) int64.

    Raises:
        ValueError: Wrong ranks, shapes or dtypes, V = 0, or temperature <= 0.
    """
    if logits.dim() != 2 or logits.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"logits must be (T, V) bf16/fp16/fp32; got {tuple(logits.shape)} {logits.dtype}"
        )
    if uniform_noise.shape != logits.shape or uniform_noise.dtype != torch.float32:
        raise ValueError(
            f"uniform_noise must be fp32 with the shape of logits {tuple(logits.shape)}; got "
            f"{tuple(uniform_noise.shape)} {uniform_noise.dtype}"
        )
    if logits.shape[1] == 0:
        raise ValueError("logits has an empty vocab dimension (V = 0); nothing to sample")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0; got {temperature} (use greedy argmax for 0)")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    u = uniform_noise if uniform_noise.stride(-1) == 1 else uniform_noise.contiguous()
    t, v = x.shape
    out = torch.empty((t,), dtype=torch.int64, device=x.device)
    if t == 0:
        return out
    cfg = _launch_config(v)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _gumbel_max_sample_kernel[(t,)](
        x, u, out,
        v,
        x.stride(0), u.stride(0),
        1.0 / float(temperature),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(
    logits: torch.Tensor, uniform_noise: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """Return argmax(logits / temperature - log(-log(noise))) in fp32 per row."""
    scores = logits.float() * (1.0 / temperature) - torch.log(-torch.log(uniform_noise))
    return torch.argmax(scores, dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logits", "uniform_noise", "temperature"}`` for ``{"rows", "vocab"}``.

    Logits ~ N(0, 1) * 3 (peaked enough that the sample is not uniform), noise ~ U[0, 1),
    temperature from ``shape["temperature"]`` (default 0.8).
    """
    t, v = shape["rows"], shape["vocab"]
    logits = (torch.randn(t, v, device=device) * 3.0).to(dtype)
    noise = torch.rand(t, v, device=device)
    return {"logits": logits, "uniform_noise": noise, "temperature": shape.get("temperature", 0.8)}
