"""
---
id: embedding_lookup_rowwise
title: Token embedding gather, one program per token row with a vectorised loop over hidden
op_family: embedding
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, gather, vectorized-loads, chunked-loop]
status: reference
launcher: embedding_lookup_rowwise
tuning:
  block_h: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8]
args:
  ids: {shape: [T], dtypes: [int32, int64], aliases: [input_ids, input, token_ids]}
  weight: {shape: [V, H], dtypes: [bf16, fp16, fp32], aliases: [embedding, embed_tokens, table]}
returns:
  - {name: out, shape: [T, H], dtype: weight}
problem:
  shapes: [{tokens: 7, vocab: 100, hidden: 300}, {tokens: 33, vocab: 50, hidden: 64}]
  dtypes: [fp32, bf16]
measured: []
---
out[t, :] = weight[ids[t], :] (torch.nn.functional.embedding without padding_idx or max_norm). One
program per token loads its id once, then copies the table row to the output in BLOCK_H-wide
chunks; rows are contiguous, so each chunk compiles to 16-byte vector loads and stores, and the
row offset id * stride is computed in int64 (a 150K x 8K table has more than 2^31 elements). Bytes
per output element: one read of the table row and one write (2 + 2 B in bf16), plus 4-8 B per
token for the id; repeated ids hit in L2. Limits: ids are not bounds-checked (an id outside [0, V)
reads out of bounds; torch raises instead), so the caller validates them; one program per token, so
very short hidden sizes are launch-bound (stack tokens per program, as the vocab-parallel variant
does, for H <= 256).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _embedding_lookup_rowwise_kernel(
    # pointers
    ids_ptr,
    w_ptr,
    out_ptr,
    # sizes
    H,
    # strides (elements; the last dim is contiguous)
    stride_wv,
    stride_ot,
    # meta
    BLOCK_H: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)
    row = tl.load(ids_ptr + tok).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    src = w_ptr + row * stride_wv
    dst = out_ptr + tok * stride_ot
    offs = tl.arange(0, BLOCK_H)
    for start in range(0, H, BLOCK_H):
        cols = start + offs
        mask = cols < H
        tl.store(dst + cols, tl.load(src + cols, mask=mask), mask=mask)  # a plain copy


def _launch_config(h: int) -> dict[str, int]:
    """Return the chunk (the whole row up to 4096 columns) and warps (about 8 per thread)."""
    block_h = min(triton.next_power_of_2(h), 4096)
    return {"block_h": block_h, "num_warps": min(max(block_h // 256, 1), 8)}


def embedding_lookup_rowwise(
    ids: torch.Tensor,
    weight: torch.Tensor,
    *,
    block_h: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return weight[ids] (one table row per id).

    Args:
        ids: int32/int64 token ids of any shape, each in [0, V) (not checked on the device).
        weight: (V, H) bf16/fp16/fp32 table, last dimension contiguous.
        block_h: Hidden columns per loop step (power of two); None = min(next_pow2(H), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: ids.shape + (H,) in weight's dtype, contiguous.

    Raises:
        ValueError: ids is not an integer tensor, or weight is not 2D floating point.
    """
    if ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"ids must be int32/int64; got {ids.dtype}")
    if weight.dim() != 2 or weight.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(
            f"weight must be (V, H) bf16/fp16/fp32; got {tuple(weight.shape)} {weight.dtype}"
        )
    w = weight if weight.stride(-1) == 1 else weight.contiguous()
    flat = ids.reshape(-1).contiguous()
    h = w.shape[1]
    out = torch.empty((flat.numel(), h), dtype=w.dtype, device=w.device)
    if out.numel() == 0:
        return out.reshape(*ids.shape, h)
    cfg = _launch_config(h)
    given = {"block_h": block_h, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _embedding_lookup_rowwise_kernel[(flat.numel(),)](
        flat, w, out,
        h,
        w.stride(0), out.stride(0),
        BLOCK_H=cfg["block_h"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out.reshape(*ids.shape, h)


def reference(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Return torch.nn.functional.embedding(ids, weight)."""
    return torch.nn.functional.embedding(ids, weight)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"ids", "weight"}`` for ``{"tokens", "vocab", "hidden"}``; N(0, 1) * 0.02 table."""
    ids = torch.randint(0, shape["vocab"], (shape["tokens"],), device=device)
    weight = (torch.randn(shape["vocab"], shape["hidden"], device=device) * 0.02).to(dtype)
    return {"ids": ids, "weight": weight}
