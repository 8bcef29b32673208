"""
---
id: gated_delta_rule_update_k_split_atomic
title: Gated delta rule decode step with K split over programs and atomic fp32 reductions
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [split-k, atomic-add, fp32-workspace, two-pass, fused-gating, l2norm-qk, gqa]
status: reference
launcher: gated_delta_rule_update_k_split_atomic
tuning:
  block_k: [32, 16, 64, 128]
  block_v: [32, 16, 64, 128]
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
  - {device: NVIDIA H200, shape: gated_delta_rule_update/0, dtype: fp32, latency_us: 68.864, sol_fraction: 0.0428, date: '2026-12-03'}
---
The gated delta rule (Gated DeltaNet) decode step with its state split along K as well as V, for
small decode batches where a (sequence, head, V tile) grid leaves most SMs idle. Per token, with
decay = exp(-exp(A_log) softplus(a + dt_bias)), beta = sigmoid(b) and q, k L2-normalised over K
(eps 1e-6) when asked: S <- decay S; v_new = beta (v - S^T k); S <- S + k v_new^T; o = K^-0.5 S^T
q. Every K-wide sum is linear in the raw (unnormalised) q and k, so it splits over K tiles: pass
one, over a (B * HV, K / BLOCK_K, V / BLOCK_V) grid, has each program read its (BLOCK_K, BLOCK_V)
fp32 state slice and atomically add S^T k_raw and S^T q_raw (the output's accumulation) into an
fp32 workspace, the V-tile-0 programs adding |k|^2, |q|^2 and k . q too. Pass two, on the same
grid, finishes the token from the reduced sums alone: the norms' rsqrt factors rk, rq, v_new =
beta (v - decay rk S^T k_raw), o = K^-0.5 (decay rq S^T q_raw + rk rq (k . q) v_new) (the read
after the update, without a second reduction), written by the K-tile-0 programs; every program
then applies the rank-1 update to its own slice. The state stays in an fp32 (B, HV, K, V) workspace
between tokens, gathered from the pool first and scattered into the output pool last. FLOPs as
the sequential rule (about 7 K V per token and head); bytes: the state slice is read twice and
written once per token (the price of the split), the workspaces are tiny. Limits: two launches
per token, so only for decode (T of 1 to a few); atomics make the fp32 sums' order, hence their
last bits, vary between runs; two sequences sharing a slot race.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _move_state_kernel(pool_ptr, idx_ptr, work_ptr, HVKV, BLOCK: tl.constexpr,
                       TO_POOL: tl.constexpr):  # fmt: skip
    """Gather each sequence's slot into the workspace (zeros for slot < 0), or scatter it back."""
    batch = tl.program_id(0)
    offs = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < HVKV
    slot = tl.load(idx_ptr + batch).to(tl.int64)
    work = work_ptr + batch.to(tl.int64) * HVKV + offs
    if TO_POOL:
        tl.store(pool_ptr + slot * HVKV + offs, tl.load(work, mask=mask), mask=mask & (slot >= 0))
    else:
        vals = tl.load(pool_ptr + slot * HVKV + offs, mask=mask & (slot >= 0), other=0.0)
        tl.store(work, vals, mask=mask)


@triton.jit
def _reduce_pass(
    q_ptr, k_ptr, state_ptr, red_ptr, scal_ptr, t, T, HQ, HV, K, V,
    BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)  # GQA: several value heads share one q/k head
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    S = tl.load(state_ptr + pid_bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :],
                mask=mask_k[:, None] & mask_v[None, :], other=0.0)  # fmt: skip
    qk_off = ((batch.to(tl.int64) * T + t) * HQ + hq) * K + offs_k
    q = tl.load(q_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + qk_off, mask=mask_k, other=0.0).to(tl.float32)
    red = red_ptr + pid_bh.to(tl.int64) * 2 * V + offs_v
    tl.atomic_add(red, tl.sum(S * k[:, None], axis=0), mask=mask_v)
    tl.atomic_add(red + V, tl.sum(S * q[:, None], axis=0), mask=mask_v)
    if tl.program_id(2) == 0:  # the K-wide scalars, once per K tile
        tl.atomic_add(scal_ptr + pid_bh * 3, tl.sum(k * k, axis=0))
        tl.atomic_add(scal_ptr + pid_bh * 3 + 1, tl.sum(q * q, axis=0))
        tl.atomic_add(scal_ptr + pid_bh * 3 + 2, tl.sum(k * q, axis=0))


@triton.jit
def _update_pass(
    a_log_ptr, a_ptr, dt_bias_ptr, k_ptr, v_ptr, b_ptr, state_ptr, red_ptr, scal_ptr, out_ptr,
    t, T, HQ, HV, K, V, scale, sp_beta, sp_threshold,
    USE_QK_L2NORM: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)
    offs_k = tl.program_id(1) * BLOCK_K + tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(2) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    bt = batch.to(tl.int64) * T + t
    gate_x = tl.load(a_ptr + bt * HV + hv).to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32)
    bx = gate_x * sp_beta
    softplus = tl.where(bx <= sp_threshold, tl.log(1.0 + tl.exp(bx)) / sp_beta, gate_x)
    decay = tl.exp(-tl.exp(tl.load(a_log_ptr + hv).to(tl.float32)) * softplus)
    beta = tl.sigmoid(tl.load(b_ptr + bt * HV + hv).to(tl.float32))
    kk = tl.load(scal_ptr + pid_bh * 3)
    qq = tl.load(scal_ptr + pid_bh * 3 + 1)
    kq = tl.load(scal_ptr + pid_bh * 3 + 2)
    rk = 1.0
    rq = 1.0
    if USE_QK_L2NORM:
        rk = tl.rsqrt(kk + 1e-6)
        rq = tl.rsqrt(qq + 1e-6)
    red = red_ptr + pid_bh.to(tl.int64) * 2 * V + offs_v
    sk = tl.load(red, mask=mask_v, other=0.0)
    sq = tl.load(red + V, mask=mask_v, other=0.0)
    v_off = (bt * HV + hv) * V + offs_v
    v = tl.load(v_ptr + v_off, mask=mask_v, other=0.0).to(tl.float32)
    v_new = (v - decay * rk * sk) * beta
    if tl.program_id(1) == 0:  # the read after the update, from the reduced sums
        o = (decay * rq * sq + rk * rq * kq * v_new) * scale
        tl.store(out_ptr + v_off, o.to(out_ptr.dtype.element_ty), mask=mask_v)
    k = tl.load(k_ptr + (bt * HQ + hq) * K + offs_k, mask=mask_k, other=0.0).to(tl.float32) * rk
    s_ptrs = state_ptr + pid_bh.to(tl.int64) * K * V + offs_k[:, None] * V + offs_v[None, :]
    s_mask = mask_k[:, None] & mask_v[None, :]
    S = tl.load(s_ptrs, mask=s_mask, other=0.0)
    tl.store(s_ptrs, S * decay + k[:, None] * v_new[None, :], mask=s_mask)


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


def gated_delta_rule_update_k_split_atomic(
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
    block_k: int | None = None,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the gated delta rule token by token, the state split over K and V tiles.

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
        block_k: State rows per program (power of two); None = min(next_pow2(K), 32).
        block_v: State columns per program (power of two); None = min(next_pow2(V), 32).
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
    block_k = block_k or min(triton.next_power_of_2(kd), 32)
    block_v = block_v or min(triton.next_power_of_2(vd), 32)
    for name, value in (("block_k", block_k), ("block_v", block_v)):
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
    idx = initial_state_indices.contiguous()
    hvkv = hv * kd * vd
    work = torch.empty((bsz, hv, kd, vd), dtype=torch.float32, device=q.device)
    move_grid = (bsz, triton.cdiv(hvkv, 4096))
    _move_state_kernel[move_grid](pool, idx, work, hvkv, BLOCK=4096, TO_POOL=False)
    # per-token reduction targets, zeroed once (each token adds into its own plane)
    red = torch.zeros((t, bsz * hv, 2, vd), dtype=torch.float32, device=q.device)
    scal = torch.zeros((t, bsz * hv, 3), dtype=torch.float32, device=q.device)
    a_, dt_, q_, k_, v_, b_, al_ = (x.contiguous() for x in (a, dt_bias, q, k, v, b, A_log))
    grid = (bsz * hv, triton.cdiv(kd, block_k), triton.cdiv(vd, block_v))
    meta = {"BLOCK_K": block_k, "BLOCK_V": block_v, "num_warps": num_warps or 4}
    for step in range(t):
        _reduce_pass[grid](q_, k_, work, red[step], scal[step], step, t, hq, hv, kd, vd, **meta)
        _update_pass[grid](
            al_, a_, dt_, k_, v_, b_, work, red[step], scal[step], out,
            step, t, hq, hv, kd, vd, kd**-0.5, float(softplus_beta), float(softplus_threshold),
            USE_QK_L2NORM=use_qk_l2norm, **meta,
        )  # fmt: skip
    _move_state_kernel[move_grid](final_state, idx, work, hvkv, BLOCK=4096, TO_POOL=True)
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
