"""
---
id: gated_delta_rule_decode_update
title: Gated delta-rule decode step, one program per (batch, v-head, V-block) state tile
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [decode-specialised, state-in-registers, v-split-grid, fused-gating, l2norm-qk, gqa]
status: reference
launcher: gated_delta_rule_decode_update
tuning:
  block_v: [32, 16, 64, 128]
  num_warps: [4, 1, 2, 8]
args:
  q: {shape: [B, 1, HQ, K], dtypes: [bf16, fp16, fp32], aliases: [query]}
  k: {shape: [B, 1, HQ, K], like: q, aliases: [key]}
  v: {shape: [B, 1, HV, V], like: q, aliases: [value]}
  a: {shape: [B, 1, HV], dtypes: [float], aliases: [alpha]}
  b: {shape: [B, 1, HV], dtypes: [float], aliases: [beta]}
  A_log: {shape: [HV], dtypes: [float], aliases: [a_log]}
  dt_bias: {shape: [HV], dtypes: [float]}
  initial_state: {shape: [NS, HV, K, V], dtypes: [fp32], aliases: [state, ssm_state]}
  initial_state_indices: {shape: [B], dtypes: [int32, int64], aliases: [state_indices]}
  scale: {type: float, default: null, aliases: [softmax_scale]}
  use_qk_l2norm: {type: bool, default: true, aliases: [use_qk_l2norm_in_kernel]}
returns:
  - {name: out, shape: [B, 1, HV, V], dtype: q}
  - {name: final_state, shape: [NS, HV, K, V], dtype: fp32}
problem:
  shapes: [{batch: 2, q_heads: 2, v_heads: 4, head_dim: 32}, {batch: 1, q_heads: 1, v_heads: 1, head_dim: 20}]
  dtypes: [fp32, bf16]
  atol: 0.01
  rtol: 0.01
measured: []
---
One decode token (T = 1) of the gated delta rule (Gated DeltaNet linear attention) with its gating
fused in: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), q and k L2-normalised, then S
<- exp(g) * S; v_new = beta * (v - S^T k); S <- S + k v_new^T; o = S^T q * K^-0.5, with the state S
(K, V) in fp32. Columns of S are independent (every step acts on a column j only through k, q and
v[j]), so the grid is (B * HV, V / BLOCK_V): each program loads a (K, BLOCK_V) fp32 slice of the
state of its sequence's slot once, does the whole step in registers and writes the slice out, which
gives B * HV * V / BLOCK_V programs for small decode batches (BLOCK_V = V is the classic
one-tile-per-head layout). GQA: v-head hv reads q/k head hv // (HV / HQ). Bytes: the state
dominates, 2 * K * V * 4 per (sequence, head) read+write; q/k are re-read by each V-block (from L2).
final_state is a copy of initial_state with the slots of this batch updated (slot < 0: start from
zeros, not written back): a first kernel copies the slots no sequence of the batch owns, the step
kernel reads its slot from initial_state and writes it into final_state, so every slot is read and
written once and the input is never modified. Limits: T must be 1 (see
gated_delta_rule_chunked_tokens for T > 1); K <= 256; duplicate slots race.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _copy_idle_slots_kernel(
    # pointers
    src_ptr,  # initial_state, (N, slot_numel) fp32
    dst_ptr,  # final_state, same layout
    idx_ptr,  # (B,) slots this call advances
    # sizes
    B,
    slot_numel,  # HV * K * V
    # meta
    BLOCK_B: tl.constexpr,
    BLOCK: tl.constexpr,
):
    """Copy one BLOCK chunk of slot program_id(0) unless a sequence of this batch owns the slot."""
    slot = tl.program_id(0)
    offs_b = tl.arange(0, BLOCK_B)
    hits = tl.zeros((BLOCK_B,), tl.int32)
    for b0 in range(0, B, BLOCK_B):  # B indices per program: a few hundred bytes from L2
        idx = tl.load(idx_ptr + b0 + offs_b, mask=b0 + offs_b < B, other=-1)
        hits += (idx == slot).to(tl.int32)
    idle = tl.sum(hits, axis=0) == 0  # owned slots are written by the step kernel instead
    offs = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    base = slot.to(tl.int64) * slot_numel
    mask = (offs < slot_numel) & idle
    tl.store(dst_ptr + base + offs, tl.load(src_ptr + base + offs, mask=mask), mask=mask)


@triton.jit
def _gated_delta_rule_decode_update_kernel(
    # pointers (all contiguous)
    q_ptr,
    k_ptr,
    v_ptr,
    a_ptr,
    b_ptr,
    a_log_ptr,
    dt_bias_ptr,
    state_ptr,  # initial_state (read)
    new_state_ptr,  # final_state (written)
    idx_ptr,
    out_ptr,
    # sizes
    HQ,
    HV,
    K,
    V,
    # scalars
    scale,
    # meta
    USE_QK_L2NORM: tl.constexpr,
    BLOCK_K: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    batch = pid_bh // HV
    hv = pid_bh % HV
    hq = hv // (HV // HQ)  # GQA: several v-heads share one q/k head
    offs_k = tl.arange(0, BLOCK_K)
    offs_v = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_k = offs_k < K
    mask_v = offs_v < V

    # per-head gates, fp32: g = -exp(A_log) * softplus(a + dt_bias) (beta 1, threshold 20)
    x = tl.load(a_ptr + pid_bh).to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32)
    softplus = tl.where(x <= 20.0, tl.log(1.0 + tl.exp(x)), x)
    decay = tl.exp(-tl.exp(tl.load(a_log_ptr + hv).to(tl.float32)) * softplus)
    beta = tl.sigmoid(tl.load(b_ptr + pid_bh).to(tl.float32))

    # q, k of the (batch, hq) head and this program's slice of v; fp32 from here on
    qk_off = (batch * HQ + hq).to(tl.int64) * K
    q = tl.load(q_ptr + qk_off + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + qk_off + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + pid_bh.to(tl.int64) * V + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    if USE_QK_L2NORM:
        q = q * tl.rsqrt(tl.sum(q * q, axis=0) + 1e-6)
        k = k * tl.rsqrt(tl.sum(k * k, axis=0) + 1e-6)

    # the (K, BLOCK_V) fp32 state slice of this sequence's slot; slot < 0 starts from zeros
    slot = tl.load(idx_ptr + batch).to(tl.int64)
    s_offs = (slot * HV + hv) * K * V + offs_k[:, None].to(tl.int64) * V + offs_v[None, :]
    s_mask = mask_k[:, None] & mask_v[None, :] & (slot >= 0)
    S = tl.load(state_ptr + s_offs, mask=s_mask, other=0.0)

    # the delta-rule step, all in registers
    S = S * decay
    v_new = (v - tl.sum(S * k[:, None], axis=0)) * beta  # (BLOCK_V,)
    S = S + k[:, None] * v_new[None, :]
    o = tl.sum(S * q[:, None], axis=0) * scale

    tl.store(
        out_ptr + pid_bh.to(tl.int64) * V + offs_v, o.to(out_ptr.dtype.element_ty), mask=mask_v
    )
    tl.store(new_state_ptr + s_offs, S, mask=s_mask)  # into final_state, not the input


def _launch_config(k: int, v: int) -> dict[str, int]:
    """Return the state slice (all of K, 32 columns of V) and warps (about 16 fp32 per thread)."""
    block_k = triton.next_power_of_2(k)
    block_v = min(triton.next_power_of_2(v), 32)
    return {
        "block_k": block_k,
        "block_v": block_v,
        "num_warps": max(1, min(block_k * block_v // 512, 8)),
    }


def _check(q, k, v, a, b, A_log, dt_bias, initial_state, initial_state_indices) -> None:
    """Raise ValueError unless the inputs fit the decode contract (T = 1)."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:2] != q.shape[:2]:
        raise ValueError(f"need q, k (B,T,HQ,K), v (B,T,HV,V); got {q.shape}, {k.shape}, {v.shape}")
    bsz, t, hq, kd = q.shape
    hv, vd = v.shape[2:]
    if t != 1:
        raise ValueError(f"decode kernel needs T = 1; got q {tuple(q.shape)}")
    if hv % hq or a.shape != (bsz, t, hv) or b.shape != a.shape:
        raise ValueError(f"need HV % HQ == 0 and a, b ({bsz}, {t}, {hv}); got {a.shape}, {b.shape}")
    if A_log.shape != (hv,) or dt_bias.shape != (hv,):
        raise ValueError(f"A_log, dt_bias must be ({hv},); got {A_log.shape}, {dt_bias.shape}")
    st = initial_state
    if st.dim() != 4 or st.shape[1:] != (hv, kd, vd) or st.dtype != torch.float32:
        raise ValueError(
            f"initial_state must be fp32 (N, {hv}, {kd}, {vd}); got {st.shape} {st.dtype}"
        )
    if initial_state_indices.shape != (bsz,) or kd > 256:
        raise ValueError(
            f"indices must be ({bsz},) and K <= 256; got {initial_state_indices.shape}"
        )


def gated_delta_rule_decode_update(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,  # noqa: N803 - the model's parameter name
    dt_bias: torch.Tensor,
    initial_state: torch.Tensor,
    initial_state_indices: torch.Tensor,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
    *,
    block_v: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one gated delta-rule decode step for every (sequence, v-head).

    Args:
        q: (B, 1, HQ, K) bf16/fp16/fp32.
        k: (B, 1, HQ, K) same dtype.
        v: (B, 1, HV, V) same dtype; HV a multiple of HQ.
        a: (B, 1, HV) gate input (any float dtype).
        b: (B, 1, HV) write-strength input (beta = sigmoid(b)).
        A_log: (HV,) log decay rate (fp32 in models).
        dt_bias: (HV,) added to a before the softplus.
        initial_state: (N, HV, K, V) fp32 state slots (not modified).
        initial_state_indices: (B,) int32/int64 slot of each sequence; < 0 = start from zeros.
        scale: Output scale; None = K^-0.5.
        use_qk_l2norm: L2-normalise q and k (eps 1e-6) before use.
        block_v: State columns per program (power of two); None = min(next_pow2(V), 32).
        num_warps: Warps per program; None picks by slice size.

    Returns:
        (out, final_state): out (B, 1, HV, V) in q's dtype; final_state (N, HV, K, V) fp32, a
        copy of initial_state with each sequence's slot advanced by one token.

    Raises:
        ValueError: The shapes do not fit, T != 1 or K > 256.
    """
    _check(q, k, v, a, b, A_log, dt_bias, initial_state, initial_state_indices)
    bsz, _, hq, kd = q.shape
    hv, vd = v.shape[2:]
    out = torch.empty((bsz, 1, hv, vd), dtype=q.dtype, device=q.device)
    state = initial_state.contiguous()  # read only: the input slots stay intact
    # final_state: idle slots copied, owned slots written by the step kernel (no clone)
    final_state = torch.empty_like(state)
    n_slots, slot_numel = state.shape[0], hv * kd * vd
    if final_state.numel():
        copy_block = min(triton.next_power_of_2(slot_numel), 4096)
        _copy_idle_slots_kernel[(n_slots, triton.cdiv(slot_numel, copy_block))](
            state, final_state, initial_state_indices,
            bsz, slot_numel,
            BLOCK_B=min(triton.next_power_of_2(max(bsz, 1)), 1024), BLOCK=copy_block,
        )  # fmt: skip
    if bsz == 0:
        return out, final_state
    cfg = _launch_config(kd, vd)
    given = {"block_v": block_v, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    c = [t.contiguous() for t in (q, k, v, a, b, A_log, dt_bias)]
    _gated_delta_rule_decode_update_kernel[(bsz * hv, triton.cdiv(vd, cfg["block_v"]))](
        *c, state, final_state, initial_state_indices, out,
        hq, hv, kd, vd,
        kd**-0.5 if scale is None else scale,
        USE_QK_L2NORM=use_qk_l2norm,
        BLOCK_K=cfg["block_k"], BLOCK_V=cfg["block_v"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out, final_state


def reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,  # noqa: N803 - the model's parameter name
    dt_bias: torch.Tensor,
    initial_state: torch.Tensor,
    initial_state_indices: torch.Tensor,
    scale: float | None = None,
    use_qk_l2norm: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the token-sequential recurrence in fp32 PyTorch (any T)."""
    bsz, t, hq, kd = q.shape
    hv = v.shape[2]
    scale = kd**-0.5 if scale is None else scale
    rep = hv // hq
    qf = q.float().repeat_interleave(rep, dim=2)
    kf = k.float().repeat_interleave(rep, dim=2)
    if use_qk_l2norm:
        qf = qf * torch.rsqrt(qf.pow(2).sum(-1, keepdim=True) + 1e-6)
        kf = kf * torch.rsqrt(kf.pow(2).sum(-1, keepdim=True) + 1e-6)
    x = a.float() + dt_bias.float()
    decay = torch.exp(-A_log.float().exp() * torch.where(x <= 20.0, torch.log1p(x.exp()), x))
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
            kv = torch.einsum("hkv,hk->hv", S, kf[i, j])
            v_new = (v[i, j].float() - kv) * beta[i, j][:, None]
            S = S + kf[i, j][:, :, None] * v_new[:, None, :]
            out[i, j] = torch.einsum("hkv,hk->hv", S, qf[i, j]) * scale
        if slot >= 0:
            final_state[slot] = S
    return out.to(q.dtype), final_state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return launcher kwargs for ``shape = {"batch", "q_heads", "v_heads", "head_dim"}`` (T = 1).

    a, A_log and dt_bias ~ 0.02 N(0, 1) as in the atrex operator; q, k, v, b and the state ~ N(0, 1)
    (atrex uses 0.02 throughout) so that every term shows in a check. Slots are a random choice of
    B + 1; the last sequence uses slot -1 when ``"pad_slot": True``.
    """
    bsz, hq, hv, d, t = shape["batch"], shape["q_heads"], shape["v_heads"], shape["head_dim"], 1
    n_slots = bsz + 1

    def small(*size: int) -> torch.Tensor:
        return torch.randn(*size, device=device) * 0.02

    indices = torch.randperm(n_slots, device=device)[:bsz].to(torch.int32)
    if shape.get("pad_slot"):
        indices[-1] = -1
    return {
        "q": torch.randn(bsz, t, hq, d, device=device).to(dtype),
        "k": torch.randn(bsz, t, hq, d, device=device).to(dtype),
        "v": torch.randn(bsz, t, hv, d, device=device).to(dtype),
        "a": small(bsz, t, hv).to(dtype),
        "b": torch.randn(bsz, t, hv, device=device).to(dtype),
        "A_log": small(hv),
        "dt_bias": small(hv).to(dtype),
        "initial_state": torch.randn(n_slots, hv, d, d, device=device),
        "initial_state_indices": indices,
    }
