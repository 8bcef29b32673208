"""
---
id: chunk_gated_delta_rule_state_recurrent
title: Gated delta-rule chunk-state recurrence, one program per (sequence, value head, V tile)
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [chunked-linear-attention, chunk-loop, v-split-grid, state-in-registers, gated-decay]
status: reference
launcher: chunk_gated_delta_rule_state_recurrent
tuning:
  block_v: [32, 16, 64]
  num_warps: [4, 2, 8]
args:
  k: {shape: [B, T, HK, K], dtypes: [bf16, fp16, fp32], aliases: [key]}
  w: {shape: [B, T, HV, K], like: k}
  u: {shape: [B, T, HV, V], like: k}
  g: {shape: [B, T, HV], dtypes: [float], aliases: [g_cumsum]}
  initial_state: {shape: [NS, HV, K, V], dtypes: [fp32], aliases: [state, ssm_state]}
  initial_state_indices: {shape: [B], dtypes: [int32, int64], aliases: [state_indices]}
  chunk_size: {type: int, default: 64, aliases: [chunk]}
returns:
  - {name: h, shape: [B, 'ceil(T / chunk_size)', HV, K, V], dtype: k}
  - {name: v_new, shape: [B, T, HV, V], dtype: k}
  - {name: final_state, shape: [NS, HV, K, V], dtype: fp32}
problem:
  shapes: [{batch: 2, tokens: 45, k_heads: 2, v_heads: 4, key_dim: 32, value_dim: 24, chunk: 16, pad_slot: true}, {batch: 1, tokens: 70, k_heads: 1, v_heads: 1, key_dim: 64, value_dim: 64, chunk: 64}]
  dtypes: [fp32, bf16]
  allow_tf32: true
  atol: 0.02
  rtol: 0.02
measured: []
---
The chunk-by-chunk state propagation of chunked gated delta-rule attention (Gated DeltaNet's
chunk_gated_delta_rule_fwd_h). Each sequence starts from state = initial_state[slot] ((K, V) fp32
per value head; value head h uses key head h // (HV / HK)) and for each chunk of C = chunk_size
tokens (the last may be partial) records h_c = state in the storage dtype, computes v_new = u - w
h_c, then state = state * exp(g_last) + k^T (v_new * exp(g_last - g)) with g_last the chunk's last
log-decay; the second operand is rounded to the storage dtype, as a tensor-core product takes it.
Value columns are independent (w h_c, the update and the decay all act column by column), so the
grid is (B * HV, V / BLOCK_V): each program keeps a (K, BLOCK_V) fp32 slice of its state in
registers across all chunks and per chunk does two tensor-core products, (C, K) x (K, BLOCK_V) for
w h_c and (K, C) x (C, BLOCK_V) for the update, writing its slice of h_c and of v_new. A K split
would not do: w h_c sums over all of K, so K-tiles would have to exchange partial sums every chunk.
Bytes: w, k and u once per V tile (k and w re-read V / BLOCK_V times, from L2), h and v_new written
once, the state read and written once. final_state is a copy of the whole pool with each
sequence's slot advanced (slot < 0 starts from zeros, not written back); inputs are not modified.
Limits: the chunk loop is serial (NC steps); K <= 256 lives whole in registers; BLOCK_C =
next_pow2(C) <= 128; two sequences sharing a slot race.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """Return acc + a @ b with an fp32 accumulator (exact fp32 operands under the interpreter)."""
    if UPCAST:
        # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
        acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
    else:
        acc = tl.dot(a.to(b.dtype), b, acc)  # GPU: tensor cores on the storage dtype
    return acc


@triton.jit
def _to_storage(x, dt: tl.constexpr, UPCAST: tl.constexpr):
    """Round fp32 ``x`` to the storage dtype, to nearest even (the interpreter truncates bf16)."""
    if UPCAST and dt == tl.bfloat16:
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000  # RNE to the top 16 bits
        x = bits.to(tl.float32, bitcast=True)
    return x.to(dt)


@triton.jit
def _copy_pool_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """Copy the fp32 state pool (slots no sequence uses must come out unchanged)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


@triton.jit
def _chunk_state_kernel(
    k_ptr, w_ptr, u_ptr, g_ptr, state_in_ptr, idx_ptr, h_ptr, v_new_ptr, state_out_ptr,
    T, HK, HV, K, V, NC, CHUNK,
    BLOCK_C: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr, UPCAST: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hk = hv // (HV // HK)  # GQA: several value heads share one key head
    offs_c = tl.arange(0, BLOCK_C)
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    kv_mask = mask_k[:, None] & mask_v[None, :]
    slot = tl.load(idx_ptr + batch).to(tl.int64)
    s_off = (slot * HV + hv) * K * V + offs_k[:, None].to(tl.int64) * V + offs_v[None, :]
    state = tl.load(state_in_ptr + s_off, mask=kv_mask & (slot >= 0), other=0.0)  # fp32
    dt = h_ptr.dtype.element_ty

    for c in range(0, NC):
        tok = c * CHUNK + offs_c
        mask_c = (offs_c < CHUNK) & (tok < T)
        rows = batch.to(tl.int64) * T + tok
        # record h_c in the storage dtype; the same rounded values feed w @ h_c
        h_c = _to_storage(state, dt, UPCAST)
        h_off = ((batch.to(tl.int64) * NC + c) * HV + hv) * K * V
        tl.store(h_ptr + h_off + offs_k[:, None] * V + offs_v[None, :], h_c, mask=kv_mask)
        w = tl.load(w_ptr + (rows * HV + hv)[:, None] * K + offs_k[None, :],
                    mask=mask_c[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
        u = tl.load(u_ptr + (rows * HV + hv)[:, None] * V + offs_v[None, :],
                    mask=mask_c[:, None] & mask_v[None, :], other=0.0).to(tl.float32)  # fmt: skip
        v_c = u - _mma(w, h_c, tl.zeros([BLOCK_C, BLOCK_V], tl.float32), UPCAST)
        v_out = _to_storage(v_c, dt, UPCAST)
        tl.store(v_new_ptr + (rows * HV + hv)[:, None] * V + offs_v[None, :], v_out,
                 mask=mask_c[:, None] & mask_v[None, :])  # fmt: skip

        g = tl.load(g_ptr + rows * HV + hv, mask=mask_c, other=0.0).to(tl.float32)
        n_valid = tl.minimum(CHUNK, T - c * CHUNK)
        g_last = tl.sum(tl.where(offs_c == n_valid - 1, g, 0.0), axis=0)
        weighted = _to_storage(
            tl.where(mask_c[:, None], v_c * tl.exp(g_last - g)[:, None], 0.0), dt, UPCAST
        )
        k_t = tl.load(
            k_ptr + (rows * HK + hk)[None, :] * K + offs_k[:, None],
            mask=mask_k[:, None] & mask_c[None, :],
            other=0.0,
        )  # (K, C)
        state = _mma(k_t, weighted, state * tl.exp(g_last), UPCAST)

    tl.store(state_out_ptr + s_off, state, mask=kv_mask & (slot >= 0))


def _check(k, w, u, g, initial_state, initial_state_indices, chunk_size) -> None:
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    shapes = f"k {tuple(k.shape)}, w {tuple(w.shape)}, u {tuple(u.shape)}, g {tuple(g.shape)}"
    if k.dim() != 4 or w.dim() != 4 or u.dim() != 4:
        raise ValueError(f"need k (B, T, HK, K), w (B, T, HV, K), u (B, T, HV, V); got {shapes}")
    bsz, t, hk, kd = k.shape
    hv, vd = u.shape[2:]
    if tuple(w.shape) != (bsz, t, hv, kd) or u.shape[:2] != k.shape[:2] or hv % hk or kd > 256:
        raise ValueError(f"need matching B, T, K, HV (a multiple of HK) and K <= 256; got {shapes}")
    if tuple(g.shape) != (bsz, t, hv):
        raise ValueError(f"g must be ({bsz}, {t}, {hv}); got {shapes}")
    if not 1 <= chunk_size <= 128:
        raise ValueError(f"chunk_size must be in 1..128; got {chunk_size}")
    st = initial_state
    if st.dim() != 4 or tuple(st.shape[1:]) != (hv, kd, vd) or st.dtype != torch.float32:
        raise ValueError(f"initial_state must be fp32 (N, {hv}, {kd}, {vd}); got {st.dtype} "
                         f"{tuple(st.shape)}")  # fmt: skip
    idx = initial_state_indices
    if tuple(idx.shape) != (bsz,) or idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"initial_state_indices must be int32/int64 ({bsz},); got {idx.dtype}")
    if not (k.dtype == w.dtype == u.dtype):
        raise ValueError(f"k, w, u dtypes differ: {k.dtype}, {w.dtype}, {u.dtype}")


def chunk_gated_delta_rule_state_recurrent(
    k: torch.Tensor,
    w: torch.Tensor,
    u: torch.Tensor,
    g: torch.Tensor,
    initial_state: torch.Tensor,
    initial_state_indices: torch.Tensor,
    chunk_size: int = 64,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Propagate the gated delta-rule state chunk by chunk; return (h, v_new, final_state).

    Args:
        k: (B, T, HK, K) bf16/fp16/fp32.
        w: (B, T, HV, K) same dtype; HV a multiple of HK.
        u: (B, T, HV, V) same dtype.
        g: (B, T, HV) log-decays (any float dtype), used as given.
        initial_state: (N, HV, K, V) fp32 state pool (not modified).
        initial_state_indices: (B,) int32/int64 slot per sequence; < 0 = start from zeros.
        chunk_size: Tokens per chunk (1..128).
        block_v: Value columns per program (power of two >= 16); None = min(next_pow2(V), 32).
        num_warps: Warps per program; None = 4.

    Returns:
        h (B, NC, HV, K, V) and v_new (B, T, HV, V) in k's dtype, and final_state (N, HV, K, V)
        fp32: a copy of the pool with each sequence's slot advanced over its T tokens.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    _check(k, w, u, g, initial_state, initial_state_indices, chunk_size)
    bsz, t, hk, kd = k.shape
    hv, vd = u.shape[2:]
    chunks = triton.cdiv(t, chunk_size)
    h = torch.empty((bsz, chunks, hv, kd, vd), dtype=k.dtype, device=k.device)
    v_new = torch.empty((bsz, t, hv, vd), dtype=k.dtype, device=k.device)
    pool = initial_state.contiguous()
    final_state = torch.empty_like(pool)  # out of place: the input pool stays intact
    if pool.numel():
        _copy_pool_kernel[(triton.cdiv(pool.numel(), 4096),)](
            pool, final_state, pool.numel(), BLOCK=4096
        )
    if bsz == 0 or t == 0 or vd == 0:
        return h, v_new, final_state
    block_v = block_v or min(max(16, triton.next_power_of_2(vd)), 32)
    c = [x.contiguous() for x in (k, w, u, g)]
    _chunk_state_kernel[(bsz * hv, triton.cdiv(vd, block_v))](
        *c, pool, initial_state_indices, h, v_new, final_state,
        t, hk, hv, kd, vd, chunks, chunk_size,
        BLOCK_C=max(16, triton.next_power_of_2(chunk_size)),
        BLOCK_K=max(16, triton.next_power_of_2(kd)), BLOCK_V=block_v,
        UPCAST=os.environ.get("TRITON_INTERPRET") == "1", num_warps=num_warps or 4,
    )  # fmt: skip
    return h, v_new, final_state


def reference(k, w, u, g, initial_state, initial_state_indices, chunk_size=64):
    """Chunk loop in fp32 with the two storage-dtype roundings of a tensor-core kernel."""
    bsz, t, hk, kd = k.shape
    hv, vd = u.shape[2:]
    kf = k.float().repeat_interleave(hv // hk, dim=2)
    chunks = triton.cdiv(t, chunk_size)
    state = initial_state.new_zeros(bsz, hv, kd, vd)
    slots = initial_state_indices.long()
    for i in range(bsz):
        if slots[i] >= 0:
            state[i] = initial_state[slots[i]]
    h = torch.empty(bsz, chunks, hv, kd, vd, dtype=k.dtype)
    v_new = torch.empty(bsz, t, hv, vd, dtype=torch.float32)
    for c in range(chunks):
        s0, s1 = c * chunk_size, min(t, (c + 1) * chunk_size)
        h[:, c] = state.to(k.dtype)
        v_c = u[:, s0:s1].float() - torch.einsum("bthk,bhkv->bthv", w[:, s0:s1].float(),
                                                 h[:, c].float())  # fmt: skip
        v_new[:, s0:s1] = v_c
        g_c = g[:, s0:s1].float()
        weighted = (v_c * torch.exp(g_c[:, -1:] - g_c)[..., None]).to(k.dtype).float()
        state = state * torch.exp(g_c[:, -1])[..., None, None] + torch.einsum(
            "bthk,bthv->bhkv", kf[:, s0:s1], weighted
        )
    final_state = initial_state.clone()
    for i in range(bsz):
        if slots[i] >= 0:
            final_state[slots[i]] = state[i]
    return h, v_new.to(k.dtype), final_state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return kwargs for ``{batch, tokens, k_heads, v_heads, key_dim, value_dim, chunk}``.

    k ~ 0.2 N(0, 1), w ~ 0.05 N(0, 1), u and the state ~ N(0, 1), g ~ -U(0, 1) fp32; slots a random
    choice of B of B + 1 (the last sequence gets -1 when ``"pad_slot"`` is true).
    """
    bsz, t, hk, hv = shape["batch"], shape["tokens"], shape["k_heads"], shape["v_heads"]
    kd, vd = shape["key_dim"], shape["value_dim"]
    indices = torch.randperm(bsz + 1, device=device)[:bsz].to(torch.int32)
    if shape.get("pad_slot"):
        indices[-1] = -1
    return {
        "k": (torch.randn(bsz, t, hk, kd, device=device) * 0.2).to(dtype),
        "w": (torch.randn(bsz, t, hv, kd, device=device) * 0.05).to(dtype),
        "u": torch.randn(bsz, t, hv, vd, device=device).to(dtype),
        "g": -torch.rand(bsz, t, hv, device=device),
        "initial_state": torch.randn(bsz + 1, hv, kd, vd, device=device),
        "initial_state_indices": indices,
        "chunk_size": shape["chunk"],
    }
