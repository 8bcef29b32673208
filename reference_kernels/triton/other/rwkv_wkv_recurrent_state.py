"""
---
id: rwkv_wkv_recurrent_state
title: RWKV-4 WKV recurrence with per-channel decay and bonus, stable (a, b, p) state carried
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: latency
techniques: [recurrent-scan, channel-tile, register-state, log-space-stabilised, state-in-state-out]
status: reference
launcher: rwkv_wkv_recurrent_state
tuning:
  block_c: [64, 16, 32, 128, 256]
  num_warps: [2, 1, 4, 8]
args:
  w: {shape: [C], dtypes: [fp32], aliases: [decay, time_decay_neg_exp]}
  u: {shape: [C], dtypes: [fp32], aliases: [time_first, bonus]}
  k: {shape: [B, T, C], dtypes: [bf16, fp16, fp32], layout: rows, aliases: [key]}
  v: {shape: [B, T, C], like: k, layout: rows, aliases: [value]}
  state: {shape: [B, 3, C], dtypes: [fp32], optional: true, aliases: [wkv_state]}
returns:
  - {name: y, shape: [B, T, C], dtype: k}
  - {name: state_out, shape: [B, 3, C], dtype: fp32}
problem:
  shapes: [{batch: 2, tokens: 7, channels: 40}]
  dtypes: [fp32]
measured: []
---
The WKV "attention" of RWKV-4, a linear recurrence per channel: with decay w[c] < 0 (w =
-exp(time_decay)) and bonus u[c], y_t = (sum_{i<t} e^{(t-1-i) w + k_i} v_i + e^{u + k_t} v_t) /
(same sums without v). It is evaluated in the numerically stable form of the reference CUDA
kernel, carrying three fp32 numbers per channel: a (scaled numerator), b (scaled denominator) and p
(their common log-scale), so no exp ever overflows: per token, q = max(p, u + k) gives y = (e^{p-q}
a + e^{u+k-q} v) / (e^{p-q} b + e^{u+k-q}), then q' = max(p + w, k) updates a, b, p. Program (b, j)
owns batch b and channels [j * BLOCK_C, (j + 1) * BLOCK_C), keeps (a, b, p) in registers and walks
the T tokens in order; each step loads one coalesced row slice of k and v and stores one of y.
The state comes in (default a = b = 0, p = -1e38) and goes out (B, 3, C), so a decode step or the
next chunk continues exactly. Bytes per element: k and v read, y written (6 bytes in bf16); about
12 FLOPs and 4 exps. When it wins: decode and short prefill chunks; memory bound once B * C /
BLOCK_C programs fill the GPU. Limits: serial in T (no chunked parallel form; long prefill with
few programs is latency bound); RWKV-4 only (no RWKV-5/6 matrix-valued state).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rwkv_wkv_kernel(
    # pointers
    w_ptr,
    u_ptr,
    k_ptr,
    v_ptr,
    state_ptr,
    y_ptr,
    state_out_ptr,
    # sizes
    T,
    C,
    # strides (elements; channels contiguous)
    stride_kb, stride_kt,
    stride_vb, stride_vt,
    stride_yb, stride_yt,
    # meta
    HAS_STATE: tl.constexpr,
    BLOCK_C: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0).to(tl.int64)
    cs = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = cs < C
    w = tl.load(w_ptr + cs, mask=c_ok, other=0.0)
    u = tl.load(u_ptr + cs, mask=c_ok, other=0.0)
    if HAS_STATE:
        aa = tl.load(state_ptr + b * 3 * C + cs, mask=c_ok, other=0.0)
        bb = tl.load(state_ptr + b * 3 * C + C + cs, mask=c_ok, other=0.0)
        pp = tl.load(state_ptr + b * 3 * C + 2 * C + cs, mask=c_ok, other=-1e38)
    else:
        aa = tl.zeros((BLOCK_C,), dtype=tl.float32)
        bb = tl.zeros((BLOCK_C,), dtype=tl.float32)
        pp = tl.full((BLOCK_C,), -1e38, tl.float32)
    for t in range(T):
        kk = tl.load(k_ptr + b * stride_kb + t * stride_kt + cs, mask=c_ok, other=0.0)
        vv = tl.load(v_ptr + b * stride_vb + t * stride_vt + cs, mask=c_ok, other=0.0)
        kk = kk.to(tl.float32)
        vv = vv.to(tl.float32)
        ww = u + kk
        q = tl.maximum(pp, ww)
        e1 = tl.exp(pp - q)
        e2 = tl.exp(ww - q)
        y = (e1 * aa + e2 * vv) / (e1 * bb + e2)
        tl.store(
            y_ptr + b * stride_yb + t * stride_yt + cs, y.to(y_ptr.dtype.element_ty), mask=c_ok
        )
        ww = w + pp
        q = tl.maximum(ww, kk)
        e1 = tl.exp(ww - q)
        e2 = tl.exp(kk - q)
        aa = e1 * aa + e2 * vv
        bb = e1 * bb + e2
        pp = q
    tl.store(state_out_ptr + b * 3 * C + cs, aa, mask=c_ok)
    tl.store(state_out_ptr + b * 3 * C + C + cs, bb, mask=c_ok)
    tl.store(state_out_ptr + b * 3 * C + 2 * C + cs, pp, mask=c_ok)


def rwkv_wkv_recurrent_state(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor | None = None,
    *,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return the WKV outputs and the final (a, b, p) state.

    Args:
        w: (C,) fp32 per-channel log-decay, negative (-exp(time_decay)).
        u: (C,) fp32 per-channel bonus of the current token (time_first).
        k: (B, T, C) bf16/fp16/fp32 keys, channels contiguous.
        v: (B, T, C) same dtype, channels contiguous.
        state: (B, 3, C) fp32 (a, b, p) carried in; None = the empty state (0, 0, -1e38).
        block_c: Channels per program (power of two); None = min(next_pow2(C), 64).
        num_warps: Warps per program; None = 2.

    Returns:
        (y, state_out): (B, T, C) with k's dtype, and (B, 3, C) fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if k.dim() != 3 or v.shape != k.shape or v.dtype != k.dtype:
        raise ValueError(
            f"k/v must be (B, T, C) of one dtype; got {tuple(k.shape)}, {tuple(v.shape)}"
        )
    bsz, t, c = k.shape
    for name, vec in (("w", w), ("u", u)):
        if vec.shape != (c,) or vec.dtype != torch.float32:
            raise ValueError(f"{name} must be ({c},) fp32; got {tuple(vec.shape)} {vec.dtype}")
    if state is not None and (state.shape != (bsz, 3, c) or state.dtype != torch.float32):
        raise ValueError(
            f"state must be ({bsz}, 3, {c}) fp32; got {tuple(state.shape)} {state.dtype}"
        )
    k = k if k.stride(2) == 1 else k.contiguous()
    v = v if v.stride(2) == 1 else v.contiguous()
    y = torch.empty((bsz, t, c), dtype=k.dtype, device=k.device)
    state_out = torch.empty((bsz, 3, c), dtype=torch.float32, device=k.device)
    if bsz * c == 0:
        return y, state_out
    cfg = {"block_c": min(triton.next_power_of_2(c), 64), "num_warps": 2}
    given = {"block_c": block_c, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    st = state.contiguous() if state is not None else state_out  # dummy pointer when absent
    _rwkv_wkv_kernel[(bsz, triton.cdiv(c, cfg["block_c"]))](
        w.contiguous(), u.contiguous(), k, v, st, y, state_out,
        t, c,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), y.stride(0), y.stride(1),
        HAS_STATE=state is not None,
        BLOCK_C=cfg["block_c"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y, state_out


def reference(
    w: torch.Tensor,
    u: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    state: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same stabilised recurrence token by token in fp64 (torch ops over (B, C))."""
    bsz, t, c = k.shape
    kd, vd, wd, ud = k.double(), v.double(), w.double(), u.double()
    if state is None:
        aa = torch.zeros(bsz, c, dtype=torch.float64, device=k.device)
        bb, pp = aa.clone(), torch.full_like(aa, -1e38)
    else:
        aa, bb, pp = state.double().unbind(1)
    ys = []
    for i in range(t):
        ww = ud + kd[:, i]
        q = torch.maximum(pp, ww)
        e1, e2 = (pp - q).exp(), (ww - q).exp()
        ys.append((e1 * aa + e2 * vd[:, i]) / (e1 * bb + e2))
        ww = wd + pp
        q = torch.maximum(ww, kd[:, i])
        e1, e2 = (ww - q).exp(), (kd[:, i] - q).exp()
        aa, bb, pp = e1 * aa + e2 * vd[:, i], e1 * bb + e2, q
    y = torch.stack(ys, dim=1) if ys else torch.empty(bsz, 0, c, dtype=torch.float64)
    return y.to(k.dtype), torch.stack([aa, bb, pp], dim=1).float()


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"batch", "tokens", "channels"}``; a random carried-in state."""
    b, t, c = shape["batch"], shape["tokens"], shape["channels"]
    state = torch.stack([torch.randn(b, c), torch.rand(b, c) + 0.5, torch.randn(b, c)], dim=1)
    return {
        "w": -torch.exp(torch.randn(c, device=device) - 1.0),
        "u": torch.randn(c, device=device) * 0.5,
        "k": torch.randn(b, t, c, device=device).to(dtype),
        "v": torch.randn(b, t, c, device=device).to(dtype),
        "state": state.to(device),
    }
