"""
---
id: topk_filter_multi_cta_radix
title: Top-k logit mask in one launch, rows split over programs, the last-arriving one fixes it
op_family: sampling
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32]
bound: memory
techniques: [split-row-grid, radix-bisection, order-preserving-int-key, candidate-merge,
  last-block-reduction, atomic-counter, stream-compaction, single-launch]
status: reference
launcher: topk_filter_multi_cta_radix
tuning:
  block_v: [2048, 1024, 4096, 8192]
  num_warps: [8, 4, 16]
  block_c: [8192, 4096, 16384]
args:
  logits: {shape: [T, V], dtypes: [fp32], aliases: [x, scores, input]}
  top_k: {type: int, default: 50, aliases: [k, topk]}
returns:
  - {name: out, shape: [T, V], dtype: fp32}
problem:
  shapes: [{rows: 3, vocab: 1001, top_k: 50}, {rows: 2, vocab: 9000, top_k: 50},
    {rows: 2, vocab: 5000, top_k: 7, ties: true}]
  dtypes: [fp32]
measured:
  - {device: NVIDIA H200, shape: topk_filter/0, dtype: fp32, latency_us: 29.504, sol_fraction: 0.0944, date: '2026-12-04'}
---
atrex30's topk_filter (keep every logit >= its row's k-th largest, ties all kept, kept values
bit-identical, the rest -inf; a row of at most k entries is copied whole) in one launch that reads
each logit once and writes it once. The multi-pass split-row radix (topk_filter_radix) spends 9
launches and 5 reads per logit, and its decode time is the host's launch cost, not the GPU's; a
two-launch design (candidates, then a masked write) reads every logit twice. Here a (rows,
V / BLOCK_V) grid does everything in one pass: program (r, c) maps its chunk to int32 keys whose
order is the float order (-0.0 folded onto +0.0, so key order equals the reference's float
compare), bisects the top 16 key bits for the chunk's k-th largest (16 block-wide counts; the row's
k-th largest is never below any chunk's, so this is a floor for the row), raises the row's floor
with an atomic max and takes the larger of its own and the row's floor so far, writes x where
key >= floor and -inf elsewhere (a superset of the final mask), and appends its survivors' keys
and columns to a per-row candidate list (a block cumsum for the slots, one atomic for the base).
Then it takes a ticket; the program that arrives last for the row (release/acquire atomics, the
classic last-block reduction, no spin-wait, so it also runs in the interpreter) finds the exact
k-th largest key among the candidates by a 32-step bisection (in registers when they fit in
BLOCK_C, streamed otherwise) and writes -inf over the candidates below it. With N(0,1) logits,
1 x 151936 leaves ~3-4K candidates at BLOCK_V 2048 and ~2K at 4096 (a CPU count), so the serial
tail is one program on a list that fits BLOCK_C 8192.
Rows of V <= 4096 use one program per row (no list, exact bisection in registers). Bytes: 4 read
+ 4 written per logit, plus 8 per candidate; one torch.zeros for the per-row counters.
Limits: no NaN; the candidate list is sized for the worst case (every logit tied), (T, 2, V) int32
of memory, touched only for candidates.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _ordered_key(x):
    """Map fp32 to int32 of the same order; -0.0 gets +0.0's key (the float compare ties them)."""
    bits = x.to(tl.int32, bitcast=True)
    bits = tl.where(bits == -(2**31), 0, bits)  # -0.0 -> +0.0
    return tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)


@triton.jit
def _kth_prefix(key, valid, k, SHIFT: tl.constexpr):
    """Return the largest p with count(valid & (key >> SHIFT) >= p) >= k (the minimum if none)."""
    STEPS: tl.constexpr = 32 - SHIFT
    pre = key >> SHIFT  # arithmetic shift: the order of the top 32 - SHIFT bits
    lo = tl.full((), -(2 ** (STEPS - 1)), tl.int64)  # invariant: count(pre >= lo) >= k or lo = min
    hi = tl.full((), 2 ** (STEPS - 1), tl.int64)  # invariant: count(pre >= hi) < k
    for _ in range(STEPS):
        mid = lo + ((hi - lo) >> 1)  # lo <= mid < hi, so it fits int32: compare in 32 bits
        count = tl.sum((valid & (pre >= mid.to(tl.int32))).to(tl.int32), axis=0)
        enough = count >= k
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    return lo.to(tl.int32)  # in [-2^31, 2^31)


@triton.jit
def _kth_key_streamed(key_ptr, m, k, BLOCK_C: tl.constexpr):
    """Return the k-th largest of m int32 keys at key_ptr, re-reading them per step (from L1/L2)."""
    offs = tl.arange(0, BLOCK_C)
    lo = tl.full((), -(2**31), tl.int64)
    hi = tl.full((), 2**31, tl.int64)
    for _ in range(32):
        mid = (lo + ((hi - lo) >> 1)).to(tl.int32)
        count = tl.zeros((), dtype=tl.int32)
        for start in range(0, m, BLOCK_C):
            idx = start + offs
            inside = idx < m
            key = tl.load(key_ptr + idx, mask=inside, other=0, cache_modifier=".cg")
            count += tl.sum((inside & (key >= mid)).to(tl.int32), axis=0)
        enough = count >= k
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    return lo.to(tl.int32)  # in [-2^31, 2^31)


@triton.jit
def _topk_filter_multi_cta_kernel(
    # pointers: logits, output, per-row counters (floor, count, ticket, pad), candidate lists
    x_ptr, out_ptr, state_ptr, cand_ptr,
    # sizes: vocab, kept count (< V), programs per row
    V, k, n_chunks,
    # strides (elements; the last dim is contiguous)
    stride_x, stride_o,
    # meta
    SINGLE: tl.constexpr, KEEP_ALL: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_C: tl.constexpr,
):  # fmt: skip
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    valid = cols < V
    x = tl.load(x_ptr + row * stride_x + cols, mask=valid, other=0.0)
    out_row = out_ptr + row * stride_o
    if KEEP_ALL:  # top_k >= V: the reference returns the row unchanged
        tl.store(out_row + cols, x, mask=valid)
    elif SINGLE:  # the whole row is this block: exact 32-bit bisection in registers
        key = _ordered_key(x)
        kth = _kth_prefix(key, valid, k, 0)
        tl.store(out_row + cols, tl.where(key >= kth, x, float("-inf")), mask=valid)
    else:
        key = _ordered_key(x)
        state = state_ptr + row * 4
        # 1. the chunk's floor: the 16-bit prefix of its k-th largest key (all keys if < k valid)
        local = _kth_prefix(key, valid, k, 16) + 32768  # stored >= 0, zero = lowest
        floor = tl.maximum(local, tl.atomic_max(state, local, sem="relaxed")) - 32768
        survive = valid & ((key >> 16) >= floor)
        # 2. provisional mask: every entry the final mask keeps survives (floor <= row's k-th)
        tl.store(out_row + cols, tl.where(survive, x, float("-inf")), mask=valid)
        # 3. append the survivors' keys and columns to the row's candidate list
        n_survive = tl.sum(survive.to(tl.int32), axis=0)
        slot = tl.cumsum(survive.to(tl.int32), axis=0) - 1
        base = tl.atomic_add(state + 1, n_survive, sem="relaxed")
        cand_keys = cand_ptr + row * 2 * V
        cand_cols = cand_keys + V
        tl.store(cand_keys + base + slot, key, mask=survive)
        tl.store(cand_cols + base + slot, cols, mask=survive)
        # 4. every thread's stores precede the ticket (CTA barrier + release); the last program
        #    of the row acquires them all and fixes the mask
        tl.debug_barrier()
        ticket = tl.atomic_add(state + 2, 1, sem="acq_rel")
        if ticket == n_chunks - 1:
            m = tl.atomic_add(state + 1, 0, sem="acq_rel")  # candidates of the whole row
            offs = tl.arange(0, BLOCK_C)
            if m <= BLOCK_C:
                inside = offs < m
                ckey = tl.load(cand_keys + offs, mask=inside, other=0, cache_modifier=".cg")
                kth = _kth_prefix(ckey, inside, k, 0)
            else:  # heavy ties or a large k: stream the list for every bisection step
                kth = _kth_key_streamed(cand_keys, m, k, BLOCK_C)
            for start in range(0, m, BLOCK_C):
                idx = start + offs
                inside = idx < m
                ckey = tl.load(cand_keys + idx, mask=inside, other=0, cache_modifier=".cg")
                ccol = tl.load(cand_cols + idx, mask=inside, other=0, cache_modifier=".cg")
                tl.store(out_row + ccol, float("-inf"), mask=inside & (ckey < kth))


def _launch_config(t: int, v: int) -> dict[str, int]:
    """Return block_v (a row per program up to 4096 wide, else 2K/4K chunks), num_warps, block_c."""
    block_v = max(triton.next_power_of_2(v), 128)
    if v > 4096:  # split rows; a decode batch gets more, smaller chunks to reach more SMs
        block_v = 2048 if t <= 8 else 4096
    return {"block_v": block_v, "num_warps": 4 if block_v <= 1024 else 8, "block_c": 8192}


def topk_filter_multi_cta_radix(
    logits: torch.Tensor,
    top_k: int = 50,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
    block_c: int | None = None,
) -> torch.Tensor:
    """Return logits with everything below each row's top_k-th largest value set to -inf.

    Args:
        logits: (T, V) fp32, last dimension contiguous, no NaN.
        top_k: Values kept per row (ties with the k-th all kept); >= V keeps rows whole.
        block_v: Logits per program (power of two); a row of V <= block_v takes one program.
            None: the row up to 4096, else 2048 (T <= 8) or 4096.
        num_warps: Warps per program; None: 4 up to block_v 1024, else 8.
        block_c: Candidates the last program of a row holds in registers (power of two); more
            are streamed. None: 8192.

    Returns:
        out: (T, V) fp32, kept entries bit-identical to logits, the others -inf.

    Raises:
        ValueError: logits is not 2-D fp32 with a contiguous last dim, top_k < 1, or a block
            size is not a power of two.
    """
    if logits.dim() != 2 or logits.dtype != torch.float32 or logits.stride(1) != 1:
        raise ValueError(
            f"logits must be (T, V) fp32 with a contiguous last dim; got {logits.dtype} "
            f"{tuple(logits.shape)} strides {logits.stride()}"
        )
    if top_k < 1:
        raise ValueError(f"top_k must be >= 1; got {top_k}")
    t, v = logits.shape
    cfg = _launch_config(t, v)
    given = {"block_v": block_v, "num_warps": num_warps, "block_c": block_c}
    cfg.update({key: value for key, value in given.items() if value is not None})
    for name in ("block_v", "block_c"):
        if cfg[name] < 16 or cfg[name] & (cfg[name] - 1):
            raise ValueError(f"{name} must be a power of two >= 16; got {cfg[name]}")
    out = torch.empty_like(logits)
    if out.numel() == 0:
        return out
    n_chunks = triton.cdiv(v, cfg["block_v"])
    keep_all, single = top_k >= v, n_chunks == 1
    multi = not (keep_all or single)
    # per row: floor (+32768), candidate count, arrival ticket, pad; all must start at zero
    state = torch.zeros((t if multi else 1, 4), dtype=torch.int32, device=logits.device)
    # per row: candidate keys then columns; worst case every logit (all tied), so V each
    cand = torch.empty((t, 2, v) if multi else (1,), dtype=torch.int32, device=logits.device)
    _topk_filter_multi_cta_kernel[(t, n_chunks)](
        logits, out, state, cand,
        v, min(top_k, v), n_chunks,
        logits.stride(0), out.stride(0),
        SINGLE=single, KEEP_ALL=keep_all, BLOCK_V=cfg["block_v"], BLOCK_C=cfg["block_c"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(logits: torch.Tensor, top_k: int = 50) -> torch.Tensor:
    """Return atrex30 topk_filter's output: entries below the k-th largest set to -inf."""
    if top_k >= logits.shape[-1]:
        return logits.clone()
    kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
    return logits.masked_fill(logits < kth, float("-inf"))


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"logits", "top_k"}`` for ``{"rows", "vocab"}`` and optional ``"top_k"`` (50).

    N(0, 1) logits (atrex30's draw); ``"ties": True`` rounds them to multiples of 0.25 so that the
    k-th value is tied many times over.
    """
    if dtype != torch.float32:
        raise ValueError(f"topk_filter_multi_cta_radix works on fp32 logits; got {dtype}")
    logits = torch.randn(shape["rows"], shape["vocab"], device=device)
    if shape.get("ties"):
        logits = (logits * 4).round() / 4
    return {"logits": logits, "top_k": shape.get("top_k", 50)}
