"""
---
id: typical_p_filter
title: Locally typical sampling filter (entropy, |-log p - H| mass threshold) by bisection, no sort
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques:
  [row-per-program, threshold-bisection, order-preserving-int-key, online-softmax, entropy,
   chunked-loop]
status: reference
launcher: typical_p_filter
tuning:
  block_v: [1024, 256, 512, 2048, 4096]
  num_warps: [4, 1, 2, 8, 16]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores]}
  typical_p: {type: float, default: 0.95, aliases: [mass, typical_mass]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 100, typical_p: 0.9}, {rows: 2, vocab: 41, typical_p: 0.2}]
  dtypes: []
measured: []
---
Locally typical sampling (Meister et al. 2022; the TypicalLogitsWarper rule): with p =
softmax(row) and its entropy H = -sum p log p, each token's atypicality is s = |-log p - H|; the
tokens are taken in order of increasing s until their mass reaches typical_p, every token tied with
the last one taken is kept too, and the rest become -inf. Equivalently, x is kept iff the mass of
the tokens strictly more typical than x is < typical_p, which needs no sort: one program per row
runs an online max/sum pass (m, Z, log Z), an entropy pass, then bisects the threshold on the bits
of s (nonnegative fp32 bits order like the floats): 31 halvings of [0, 2^31), each one pass summing
exp(x - m) over the entries with key < mid against typical_p * Z, leave the largest kept key; a
last pass writes x or -inf. Cost: about 34 passes over the row with an exp and a subtraction per
logit each (4 bytes read per pass, mostly from L2). When it wins: large vocabularies, where the
sort + gather + scatter of the usual implementation dominates. Limits: fp32; -inf logits are
removed (they have infinite atypicality); entries whose score or exclusive mass lies within
rounding of the threshold may differ from a sort-based implementation; one program per row.
Not atrex30's topk_filter: that operator keeps each row's k largest logits (a
rank cut), while this keeps the most typical tokens (by |-log p - H|), so their -inf positions
differ.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _typical_p_filter_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    V,
    # strides (elements; last dim contiguous)
    stride_xm,
    stride_ym,
    # scalars
    typical_p,
    # meta
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_V)
    m = tl.full((), float("-inf"), tl.float32)
    z = tl.zeros((), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        mask = start + offs < V
        x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        z = z * tl.exp(m - m_new) + tl.sum(tl.where(mask, tl.exp(x - m_new), 0.0), axis=0)
        m = m_new
    log_z = m + tl.log(z)
    # entropy H = -sum p * (x - log Z) = log Z - sum(e * x) / Z over the finite entries
    ex = tl.zeros((), dtype=tl.float32)
    for start in range(0, V, BLOCK_V):
        mask = start + offs < V
        x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
        finite = tl.where(x > float("-inf"), x, 0.0)  # 0 * -inf would be NaN
        ex += tl.sum(tl.exp(x - m) * finite, axis=0)
    ent = log_z - ex / z
    target = typical_p * z
    # invariant: mass(key < lo) < target (lo = 0: empty) and mass(key < hi) >= target
    lo = tl.zeros((), dtype=tl.int64)
    hi = tl.full((), 2**31, tl.int64)
    for _ in range(31):
        mid = lo + ((hi - lo) >> 1)
        mass = tl.zeros((), dtype=tl.float32)
        for start in range(0, V, BLOCK_V):
            mask = start + offs < V
            x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
            key = tl.abs(log_z - x - ent).to(tl.int32, bitcast=True).to(tl.int64)
            mass += tl.sum(tl.where(mask & (key < mid), tl.exp(x - m), 0.0), axis=0)
        few = mass < target
        lo = tl.where(few, mid, lo)
        hi = tl.where(few, hi, mid)
    for start in range(0, V, BLOCK_V):
        mask = start + offs < V
        x = tl.load(x_row + start + offs, mask=mask, other=float("-inf"))
        key = tl.abs(log_z - x - ent).to(tl.int32, bitcast=True).to(tl.int64)
        tl.store(y_row + start + offs, tl.where(key <= lo, x, float("-inf")), mask=mask)


def typical_p_filter(
    logits: torch.Tensor,
    typical_p: float = 0.95,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return logits with the atypical tail of each row (beyond mass typical_p) set to -inf.

    Args:
        logits: (T, V) fp32, last dimension contiguous.
        typical_p: Mass of the most typical tokens to keep, in (0, 1].
        block_v: Vocab chunk per loop step (power of two); None = min(next_pow2(V), 1024).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        out: (T, V) fp32, contiguous.

    Raises:
        ValueError: logits is not 2D fp32, or typical_p is outside (0, 1].
    """
    if logits.dim() != 2 or logits.dtype != torch.float32:
        raise ValueError(f"logits must be (T, V) fp32; got {tuple(logits.shape)} {logits.dtype}")
    if not 0.0 < typical_p <= 1.0:
        raise ValueError(f"typical_p must lie in (0, 1]; got {typical_p}")
    x = logits if logits.stride(-1) == 1 else logits.contiguous()
    t, v = x.shape
    y = torch.empty((t, v), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y
    block = min(triton.next_power_of_2(v), 1024)
    cfg = {"block_v": block, "num_warps": min(max(block // 256, 1), 16)}
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _typical_p_filter_kernel[(t,)](
        x, y,
        v,
        x.stride(0), y.stride(0),
        float(typical_p),
        BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(logits: torch.Tensor, typical_p: float = 0.95) -> torch.Tensor:
    """Sort by |-log p - H|, keep the prefix whose exclusive mass is < typical_p, ties included."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    ent = -torch.nansum(p * logp, dim=-1, keepdim=True)
    score = (-logp - ent).abs()
    sorted_s, order = score.sort(dim=-1)
    sorted_p = p.gather(-1, order)
    exclusive = sorted_p.cumsum(dim=-1) - sorted_p
    limit = torch.where(exclusive < typical_p, sorted_s, -1.0).max(dim=-1, keepdim=True).values
    return logits.masked_fill(score > limit, float("-inf"))


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logits", "typical_p"}`` for ``{"rows", "vocab", "typical_p"}``; 3 * N(0, 1)."""
    logits = 3.0 * torch.randn(shape["rows"], shape["vocab"], device=device)
    return {"logits": logits.to(dtype), "typical_p": shape.get("typical_p", 0.95)}
