"""
---
id: gated_delta_rule_update_multi_seq_tile
title: Gated delta rule for decode batches, each program advancing several sequences' state slices
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [multi-sequence-tile, token-loop, state-in-registers, fused-gating, l2norm-qk, gqa]
status: reference
launcher: gated_delta_rule_update_multi_seq_tile
tuning:
  block_b: [4, 1, 2, 8, 16]
  block_v: [32, 16, 64]
  num_warps: [4, 1, 2, 8]
args:
  A_log: {shape: [HV], dtypes: [float], aliases: [a_log]}
  a: {shape: [B, T, HV], dtypes: [float], aliases: [alpha]}
  dt_bias: {shape: [HV], dtypes: [float]}
  q: {shape: [B, T, HQ, K], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, T, HQ, K], like: q, aliases: [key]}
  v: {shape: [B, T, HV, V], like: q, aliases: [value]}
  b: {shape: [B, T, HV], dtypes: [float], aliases: [beta]}
  initial_state: {shape: [NS, HV, K, V], dtypes: [fp32], aliases: [state, ssm_state]}
  initial_state_indices: {shape: [B], dtypes: [int32, int64], aliases: [state_indices]}
  softplus_beta: {type: float, default: 1.0}
  softplus_threshold: {type: float, default: 20.0}
  use_qk_l2norm: {type: bool, default: true, aliases: [use_qk_l2norm_in_kernel]}
returns:
  - {name: out, shape: [B, T, HV, V], dtype: q}
  - {name: final_state, shape: [NS, HV, K, V], dtype: fp32}
problem:
  shapes: [{batch: 5, tokens: 2, q_heads: 1, v_heads: 2, key_dim: 32, value_dim: 24}, {batch: 2, tokens: 3, q_heads: 2, v_heads: 4, key_dim: 16, value_dim: 16, pad_slot: true}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: gated_delta_rule_update/0, dtype: fp32, latency_us: 12.496, sol_fraction: 0.2356, date: '2026-12-03'}
---
The token-sequential gated delta rule (Gated DeltaNet) with fused gates, built for decode batches
of many short sequences: per value head, decay = exp(-exp(A_log) * softplus(a + dt_bias)), beta =
sigmoid(b), q and k L2-normalised over K (eps 1e-6) when asked; per token S <- decay * S; v_new =
beta * (v - S^T k); S <- S + k v_new^T; o = S^T q * K^-0.5, the (K, V) state fp32. Grid: (B /
BLOCK_B, HV, V / BLOCK_V). A program owns the same value head and V tile of BLOCK_B sequences: it
gathers their slots into a (BLOCK_B, K, BLOCK_V) fp32 register tile, loads the head's A_log and
dt_bias once for all of them, and advances all BLOCK_B recurrences together, every per-token step
a batched rank-1 update and two batched K-reductions over the 3D tile. Against one program per
(sequence, head, V tile) this cuts the grid by BLOCK_B, amortises the per-program set-up (head
parameters, index math) and turns each per-token load of q, k, v into one BLOCK_B-row tile, which
helps when B is in the hundreds and T is 1-2 (per-program work is then tiny). Bytes: each state
slice read and written once; q, k re-read by each V tile (from L2). final_state is a copy of the
whole pool with each sequence's slot advanced (slot < 0 starts from zeros, not written back); the
inputs are not modified. Limits: equal-length sequences (one T); registers grow as BLOCK_B * K *
BLOCK_V, so the default keeps BLOCK_B * BLOCK_V at 128 (K = 128: 64 KiB of state per program);
long prefills serialise T steps, use a chunked kernel; two sequences sharing a slot race.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gated_delta_rule_multi_seq_kernel(
    a_log_ptr, a_ptr, dt_bias_ptr, q_ptr, k_ptr, v_ptr, b_ptr,
    state_in_ptr, idx_ptr, state_out_ptr, out_ptr,
    B, T, HQ, HV, K, V, scale, sp_beta, sp_threshold,
    USE_QK_L2NORM: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):  # fmt: skip
    seqs = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    hv = tl.program_id(1)
    hq = hv // (HV // HQ)  # GQA: several value heads share one q/k head
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_b = seqs < B
    mask_k = offs_k < K
    mask_v = offs_v < V
    neg_rate = -tl.exp(tl.load(a_log_ptr + hv).to(tl.float32))  # once for all BLOCK_B sequences
    bias = tl.load(dt_bias_ptr + hv).to(tl.float32)

    # the BLOCK_B sequences' (K, BLOCK_V) slices of their slots; slot < 0 starts from zeros
    slot = tl.load(idx_ptr + seqs, mask=mask_b, other=-1).to(tl.int64)
    s_off = (
        ((slot * HV + hv) * K * V)[:, None, None]
        + offs_k[None, :, None].to(tl.int64) * V
        + offs_v[None, None, :]
    )
    s_mask = (slot >= 0)[:, None, None] & mask_k[None, :, None] & mask_v[None, None, :]
    S = tl.load(state_in_ptr + s_off, mask=s_mask, other=0.0)  # (BLOCK_B, BLOCK_K, BLOCK_V)

    for t in range(0, T):
        bt = seqs.to(tl.int64) * T + t  # (batch, token) rows of the BLOCK_B sequences
        gate_x = tl.load(a_ptr + bt * HV + hv, mask=mask_b, other=0.0).to(tl.float32) + bias
        bx = gate_x * sp_beta
        softplus = tl.where(bx <= sp_threshold, tl.log(1.0 + tl.exp(bx)) / sp_beta, gate_x)
        decay = tl.exp(neg_rate * softplus)  # (BLOCK_B,)
        beta = tl.sigmoid(tl.load(b_ptr + bt * HV + hv, mask=mask_b, other=0.0).to(tl.float32))
        qk_off = ((bt * HQ + hq) * K)[:, None] + offs_k[None, :]
        qk_mask = mask_b[:, None] & mask_k[None, :]
        q = tl.load(q_ptr + qk_off, mask=qk_mask, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + qk_off, mask=qk_mask, other=0.0).to(tl.float32)
        if USE_QK_L2NORM:
            q = q * tl.rsqrt(tl.sum(q * q, axis=1) + 1e-6)[:, None]
            k = k * tl.rsqrt(tl.sum(k * k, axis=1) + 1e-6)[:, None]
        v_off = ((bt * HV + hv) * V)[:, None] + offs_v[None, :]
        v_mask = mask_b[:, None] & mask_v[None, :]
        v = tl.load(v_ptr + v_off, mask=v_mask, other=0.0).to(tl.float32)

        S = S * decay[:, None, None]
        v_new = (v - tl.sum(S * k[:, :, None], axis=1)) * beta[:, None]  # (BLOCK_B, BLOCK_V)
        S = S + k[:, :, None] * v_new[:, None, :]
        o = tl.sum(S * q[:, :, None], axis=1) * scale
        tl.store(out_ptr + v_off, o.to(out_ptr.dtype.element_ty), mask=v_mask)

    tl.store(state_out_ptr + s_off, S, mask=s_mask)


@triton.jit
def _copy_pool_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    """Copy the fp32 state pool (slots no sequence uses must come out unchanged)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def _check(A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices) -> None:  # noqa: N803
    """Raise ValueError naming the shapes when the inputs do not fit together."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(
            f"need q, k (B, T, HQ, K) and v (B, T, HV, V); got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    if hv % hq or kd > 256:
        raise ValueError(f"need HQ ({hq}) dividing HV ({hv}) and K ({kd}) <= 256")
    for name, x in (("a", a), ("b", b)):
        if tuple(x.shape) != (bsz, t, hv):
            raise ValueError(f"{name} must be ({bsz}, {t}, {hv}); got {tuple(x.shape)}")
    for name, x in (("A_log", A_log), ("dt_bias", dt_bias)):
        if tuple(x.shape) != (hv,):
            raise ValueError(f"{name} must be ({hv},); got {tuple(x.shape)}")
    st = initial_state
    if st.dim() != 4 or tuple(st.shape[1:]) != (hv, kd, vd) or st.dtype != torch.float32:
        raise ValueError(f"initial_state must be fp32 (N, {hv}, {kd}, {vd}); got {st.dtype} "
                         f"{tuple(st.shape)}")  # fmt: skip
    idx = initial_state_indices
    if tuple(idx.shape) != (bsz,) or idx.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"initial_state_indices must be int32/int64 ({bsz},); got {idx.dtype}")


def gated_delta_rule_update_multi_seq_tile(
    A_log: torch.Tensor,  # noqa: N803 - the model's parameter name
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor,
    initial_state_indices: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    use_qk_l2norm: bool = True,
    *,
    block_b: int | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the gated delta rule over every sequence's T tokens, BLOCK_B sequences per program.

    Args:
        A_log: (HV,) log decay rate.
        a: (B, T, HV) gate input (any float dtype).
        dt_bias: (HV,) added to a before the softplus.
        q: (B, T, HQ, K) bf16/fp16/fp32.
        k: (B, T, HQ, K) same dtype.
        v: (B, T, HV, V) same dtype; HV a multiple of HQ.
        b: (B, T, HV) write-strength input (beta = sigmoid(b)).
        initial_state: (N, HV, K, V) fp32 state pool (not modified).
        initial_state_indices: (B,) int32/int64 slot of each sequence; < 0 = start from zeros.
        softplus_beta: The softplus beta.
        softplus_threshold: Above beta * x > threshold the softplus is x.
        use_qk_l2norm: L2-normalise q and k (eps 1e-6) before use.
        block_b: Sequences per program (power of two); None = min(next_pow2(B), 4).
        block_v: State columns per program (power of two); None = min(next_pow2(V), 128 / block_b).
        num_warps: Warps per program; None = 4.

    Returns:
        (out, final_state): out (B, T, HV, V) in q's dtype; final_state (N, HV, K, V) fp32, a
        copy of initial_state with each sequence's slot advanced by its T tokens.

    Raises:
        ValueError: The shapes or dtypes do not fit, K > 256, or a block is not a power of two.
    """
    _check(A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices)
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    block_b = block_b or min(triton.next_power_of_2(max(bsz, 1)), 4)
    block_v = block_v or max(1, min(triton.next_power_of_2(vd), 128 // block_b))
    for name, value in (("block_b", block_b), ("block_v", block_v)):
        if value <= 0 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two; got {value}")
    out = torch.empty((bsz, t, hv, vd), dtype=q.dtype, device=q.device)
    pool = initial_state.contiguous()
    final_state = torch.empty_like(pool)  # out of place: the input pool stays intact
    if pool.numel():
        _copy_pool_kernel[(triton.cdiv(pool.numel(), 4096),)](
            pool, final_state, pool.numel(), BLOCK=4096
        )
    if out.numel() == 0:
        return out, final_state
    c = [x.contiguous() for x in (A_log, a, dt_bias, q, k, v, b)]
    _gated_delta_rule_multi_seq_kernel[(triton.cdiv(bsz, block_b), hv, triton.cdiv(vd, block_v))](
        *c, pool, initial_state_indices.contiguous(), final_state, out,
        bsz, t, hq, hv, kd, vd, kd**-0.5, float(softplus_beta), float(softplus_threshold),
        USE_QK_L2NORM=use_qk_l2norm, BLOCK_B=block_b, BLOCK_K=triton.next_power_of_2(kd),
        BLOCK_V=block_v, num_warps=num_warps or 4,
    )  # fmt: skip
    return out, final_state


def reference(
    A_log: torch.Tensor,  # noqa: N803 - the model's parameter name
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor,
    initial_state_indices: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the token-sequential recurrence in fp32 PyTorch."""
    bsz, t, hq, kd = q.shape
    hv = v.shape[2]
    qf = q.float().repeat_interleave(hv // hq, dim=2)
    kf = k.float().repeat_interleave(hv // hq, dim=2)
    if use_qk_l2norm:
        qf = qf * torch.rsqrt(qf.pow(2).sum(-1, keepdim=True) + 1e-6)
        kf = kf * torch.rsqrt(kf.pow(2).sum(-1, keepdim=True) + 1e-6)
    sp = torch.nn.functional.softplus(
        a.float() + dt_bias.float(), softplus_beta, softplus_threshold
    )
    decay = torch.exp(-A_log.float().exp() * sp)
    beta = torch.sigmoid(b.float())
    final_state = initial_state.clone()
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for i in range(bsz):
        slot = int(initial_state_indices[i])
        S = (
            initial_state[slot].clone()
            if slot >= 0
            else initial_state.new_zeros(initial_state.shape[1:])
        )
        for j in range(t):
            S = S * decay[i, j][:, None, None]
            v_new = (v[i, j].float() - torch.einsum("hkv,hk->hv", S, kf[i, j])) * beta[i, j][
                :, None
            ]
            S = S + kf[i, j][:, :, None] * v_new[:, None, :]
            out[i, j] = torch.einsum("hkv,hk->hv", S, qf[i, j]) * kd**-0.5
        if slot >= 0:
            final_state[slot] = S
    return out.to(q.dtype), final_state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return launcher kwargs for ``{batch, tokens, q_heads, v_heads, key_dim, value_dim}``.

    a, A_log, dt_bias ~ 0.02 N(0, 1) (as atrex); q, k, v, b and the state ~ N(0, 1) so every term
    shows in a check. Slots: a random choice of B of B + 1 (the last sequence gets -1 when
    ``"pad_slot"`` is true).
    """
    bsz, t, hq, hv = shape["batch"], shape["tokens"], shape["q_heads"], shape["v_heads"]
    kd, vd = shape["key_dim"], shape["value_dim"]
    indices = torch.randperm(bsz + 1, device=device)[:bsz].to(torch.int32)
    if shape.get("pad_slot"):
        indices[-1] = -1
    return {
        "A_log": torch.randn(hv, device=device) * 0.02,
        "a": (torch.randn(bsz, t, hv, device=device) * 0.02).to(dtype),
        "dt_bias": (torch.randn(hv, device=device) * 0.02).to(dtype),
        "q": torch.randn(bsz, t, hq, kd, device=device).to(dtype),
        "k": torch.randn(bsz, t, hq, kd, device=device).to(dtype),
        "v": torch.randn(bsz, t, hv, vd, device=device).to(dtype),
        "b": torch.randn(bsz, t, hv, device=device).to(dtype),
        "initial_state": torch.randn(bsz + 1, hv, kd, vd, device=device),
        "initial_state_indices": indices,
    }
