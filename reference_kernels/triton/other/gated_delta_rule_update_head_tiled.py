"""
---
id: gated_delta_rule_update_head_tiled
title: Gated delta rule over T tokens, one program per (sequence, value head, V tile) state slice
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [token-loop, v-split-grid, state-in-registers, fused-gating, l2norm-qk, gqa]
status: reference
launcher: gated_delta_rule_update_head_tiled
tuning:
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
  shapes: [{batch: 2, tokens: 5, q_heads: 2, v_heads: 4, key_dim: 32, value_dim: 48}, {batch: 1, tokens: 1, q_heads: 1, v_heads: 2, key_dim: 16, value_dim: 16, pad_slot: true}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured:
  - {device: NVIDIA H200, shape: gated_delta_rule_update/0, dtype: fp32, latency_us: 22.8, sol_fraction: 0.1263, date: '2026-12-03'}
---
The token-sequential gated delta rule (Gated DeltaNet) with its gates fused in, for any T: per
value head, gate = -exp(A_log) * softplus(a + dt_bias) (softplus with the given beta and
threshold), decay = exp(gate), beta = sigmoid(b), q and k L2-normalised over K (x * rsqrt(sum x^2
+ 1e-6)); then for each token S <- decay * S; v_new = beta * (v - S^T k); S <- S + k v_new^T; o =
S^T q * K^-0.5 (read after the update), with the (K, V) state in fp32. Every step touches a column
j of S only through k, q and v[j], so the state splits by value columns with no communication:
the grid is (B * HV, V / BLOCK_V) and each program keeps a (K, BLOCK_V) fp32 slice of its
sequence's slot in registers across all T tokens, re-deriving the per-token gates and the
normalised q, k (cheap: K-wide) itself. Against one program per (sequence, head) this multiplies
the programs by V / BLOCK_V, which fills the SMs for small decode batches and short prefills, and
keeps the per-program state small (K x 32 fp32 by default). Bytes: the state is read and written
once (2 * K * V * 4 per sequence and head) however long T is; q, k are re-read by each V tile
(from L2). GQA: value head h reads q/k head h // (HV / HQ). final_state is a copy of the whole
initial_state pool with each sequence's slot advanced (slot < 0 starts from zeros and is not
written back); the inputs are not modified. Limits: the token loop is serial (latency linear in
T; use a chunked algorithm for long prefills); K <= 256; two sequences sharing a slot race.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _gated_delta_rule_head_tiled_kernel(
    a_log_ptr, a_ptr, dt_bias_ptr, q_ptr, k_ptr, v_ptr, b_ptr,
    state_in_ptr, idx_ptr, state_out_ptr, out_ptr,
    T, HQ, HV, K, V, scale, sp_beta, sp_threshold,
    USE_QK_L2NORM: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_V: tl.constexpr,
):  # fmt: skip
    pid_bh = tl.program_id(0)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)  # GQA: several value heads share one q/k head
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V
    neg_rate = -tl.exp(tl.load(a_log_ptr + hv).to(tl.float32))
    bias = tl.load(dt_bias_ptr + hv).to(tl.float32)

    # this program's (K, BLOCK_V) fp32 slice of the sequence's slot; slot < 0 starts from zeros
    slot = tl.load(idx_ptr + batch).to(tl.int64)
    s_off = (slot * HV + hv) * K * V + offs_k[:, None].to(tl.int64) * V + offs_v[None, :]
    s_mask = mask_k[:, None] & mask_v[None, :] & (slot >= 0)
    S = tl.load(state_in_ptr + s_off, mask=s_mask, other=0.0)

    for t in range(0, T):
        bt = batch.to(tl.int64) * T + t  # (batch, token) row
        gate_x = tl.load(a_ptr + bt * HV + hv).to(tl.float32) + bias
        bx = gate_x * sp_beta
        softplus = tl.where(bx <= sp_threshold, tl.log(1.0 + tl.exp(bx)) / sp_beta, gate_x)
        decay = tl.exp(neg_rate * softplus)
        beta = tl.sigmoid(tl.load(b_ptr + bt * HV + hv).to(tl.float32))
        qk_off = (bt * HQ + hq) * K
        q = tl.load(q_ptr + qk_off + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        k = tl.load(k_ptr + qk_off + offs_k, mask=mask_k, other=0.0).to(tl.float32)
        if USE_QK_L2NORM:
            q = q * tl.rsqrt(tl.sum(q * q, axis=0) + 1e-6)
            k = k * tl.rsqrt(tl.sum(k * k, axis=0) + 1e-6)
        row_v = (bt * HV + hv) * V
        v = tl.load(v_ptr + row_v + offs_v, mask=mask_v, other=0.0).to(tl.float32)

        S = S * decay
        v_new = (v - tl.sum(S * k[:, None], axis=0)) * beta  # (BLOCK_V,)
        S = S + k[:, None] * v_new[None, :]
        o = tl.sum(S * q[:, None], axis=0) * scale
        tl.store(out_ptr + row_v + offs_v, o.to(out_ptr.dtype.element_ty), mask=mask_v)

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


def gated_delta_rule_update_head_tiled(
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
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the gated delta rule over every sequence's T tokens, tiled by value columns.

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
        block_v: State columns per program (power of two); None = min(next_pow2(V), 32).
        num_warps: Warps per program; None = 4 (2 for slices under 2048 elements).

    Returns:
        (out, final_state): out (B, T, HV, V) in q's dtype; final_state (N, HV, K, V) fp32, a
        copy of initial_state with each sequence's slot advanced by its T tokens.

    Raises:
        ValueError: The shapes or dtypes do not fit, or K > 256.
    """
    _check(A_log, a, dt_bias, q, k, v, b, initial_state, initial_state_indices)
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    out = torch.empty((bsz, t, hv, vd), dtype=q.dtype, device=q.device)
    pool = initial_state.contiguous()
    final_state = torch.empty_like(pool)  # out of place: the input pool stays intact
    if pool.numel():
        _copy_pool_kernel[(triton.cdiv(pool.numel(), 4096),)](
            pool, final_state, pool.numel(), BLOCK=4096
        )
    if out.numel() == 0:
        return out, final_state
    block_k = triton.next_power_of_2(kd)
    block_v = block_v or min(triton.next_power_of_2(vd), 32)
    c = [x.contiguous() for x in (A_log, a, dt_bias, q, k, v, b)]
    _gated_delta_rule_head_tiled_kernel[(bsz * hv, triton.cdiv(vd, block_v))](
        *c, pool, initial_state_indices, final_state, out,
        t, hq, hv, kd, vd, kd**-0.5, float(softplus_beta), float(softplus_threshold),
        USE_QK_L2NORM=use_qk_l2norm, BLOCK_K=block_k, BLOCK_V=block_v,
        num_warps=num_warps or (4 if block_k * block_v >= 2048 else 2),
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
