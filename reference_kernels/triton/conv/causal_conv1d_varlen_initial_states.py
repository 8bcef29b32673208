"""
---
id: causal_conv1d_varlen_initial_states
title: Causal depthwise conv1d over packed varlen sequences (cu_seqlens) with per-sequence states
op_family: conv
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [varlen, cu-seqlens, depthwise-conv, causal-shift-loads, initial-state, time-loop, fused-silu]
status: reference
launcher: causal_conv1d_varlen_initial_states
tuning:
  block_c: [32, 8, 16, 64, 128]
  block_t: [32, 8, 16, 64, 128]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [C, L], dtypes: [bf16, fp16, fp32], layout: any, aliases: [hidden_states]}
  weight: {shape: [C, W], dtypes: [float], aliases: [conv_weight]}
  bias: {shape: [C], dtypes: [float], optional: true, aliases: [conv_bias]}
  initial_state:
    {shape: ['?', C, W - 1], dtypes: [float], optional: true, aliases: [conv_states, conv_state]}
  cu_seqlens: {shape: ['?'], dtypes: [int32, int64], optional: true, aliases: [query_start_loc]}
  has_initial_state: {shape: ['?'], dtypes: [bool], optional: true}
  activation: {type: str, default: silu}
returns:
  - {name: out, shape: [C, L], dtype: x}
problem:
  shapes: [{dim: 20, seqlens: [5, 1, 13, 2]}]
  dtypes: [fp32]
measured:
  - {device: NVIDIA H200, shape: causal_conv1d/0, dtype: bf16, latency_us: 3.968, sol_fraction: 0.7339, date: '2026-12-04'}
---
The short causal convolution of Mamba-2 / Gated DeltaNet prefill when the batch's sequences are
packed back to back along time: x is (C, L) with L = the sum of the sequence lengths, and
cu_seqlens (N + 1) gives sequence n the columns [cu[n], cu[n + 1]). Within a sequence,
out[c, t] = act(bias[c] + sum_j w[c, j] * xp[c, t + j]) with xp = [initial_state[n, c] | x[c, seq]]
(the previous chunk's last W - 1 inputs), or zeros before the start when the sequence has no state
(initial_state None, or has_initial_state[n] False): the filter never reads across a sequence
boundary. Program (n, i) owns sequence n and channels [i * BLOCK_C, (i + 1) * BLOCK_C) and walks
the sequence in BLOCK_T time chunks; the W taps are unrolled, each loading the chunk shifted by
W - 1 - j steps, and lanes before the sequence start read the state instead (the shifted re-reads
hit L1, so x is read from DRAM about once). fp32 accumulate, bias and SiLU. Bytes per element: one
read and one write, plus W weights per channel and (W - 1) state values per sequence. When it wins:
ragged prefill batches without padding. Limits: one program row per sequence, so one very long
sequence is walked serially by C / BLOCK_C programs; the final conv state is not written back.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _causal_conv1d_varlen_kernel(
    # pointers
    x_ptr,
    w_ptr,
    bias_ptr,
    state_ptr,
    cu_ptr,
    has_state_ptr,
    out_ptr,
    # sizes
    C,
    L,
    # strides (elements)
    stride_xc, stride_xl,
    stride_wc, stride_wj,
    stride_sn, stride_sc, stride_sj,
    stride_oc, stride_ol,
    # meta
    W: tl.constexpr,
    HAS_CU: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_STATE: tl.constexpr,
    HAS_FLAGS: tl.constexpr,
    SILU: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_T: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    chans = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    c_ok = chans < C
    if HAS_CU:
        start = tl.load(cu_ptr + seq).to(tl.int64)
        length = tl.load(cu_ptr + seq + 1).to(tl.int64) - start
    else:  # one sequence: no cu_seqlens tensor (building one would cost a host-to-device copy)
        start = seq.to(tl.int64) * 0  # an int64 scalar, like the loaded one
        length = start + L
    if HAS_FLAGS:
        use_state = tl.load(has_state_ptr + seq) != 0
    if HAS_BIAS:
        bias = tl.load(bias_ptr + chans, mask=c_ok, other=0.0).to(tl.float32)
    else:
        bias = tl.zeros((BLOCK_C,), dtype=tl.float32)
    c2 = chans.to(tl.int64)[:, None]
    for t0 in range(0, length, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)[None, :]  # position inside the sequence
        acc = tl.zeros((BLOCK_C, BLOCK_T), dtype=tl.float32) + bias[:, None]
        for j in tl.static_range(W):
            w = tl.load(w_ptr + chans * stride_wc + j * stride_wj, mask=c_ok, other=0.0)
            src = t - (W - 1 - j)  # input position this tap reads
            in_x = (src >= 0) & (src < length) & c_ok[:, None]
            xv = tl.load(x_ptr + c2 * stride_xc + (start + src) * stride_xl, mask=in_x, other=0.0)
            if HAS_STATE:
                # src in [-(W-1), 0) reads state column W - 1 + src
                in_s = (src < 0) & c_ok[:, None]
                if HAS_FLAGS:
                    in_s = in_s & use_state
                s_ptr = state_ptr + seq * stride_sn + c2 * stride_sc + (W - 1 + src) * stride_sj
                xv += tl.load(s_ptr, mask=in_s, other=0.0)
            acc += w.to(tl.float32)[:, None] * xv.to(tl.float32)
        if SILU:
            acc = acc / (1.0 + tl.exp(-acc))
        o_ptr = out_ptr + c2 * stride_oc + (start + t) * stride_ol
        tl.store(o_ptr, acc.to(out_ptr.dtype.element_ty), mask=c_ok[:, None] & (t < length))


def _check(x, weight, bias, initial_state, cu_seqlens, has_initial_state) -> int:
    """Validate the shapes; return the number of sequences."""
    if x.dim() != 2 or weight.dim() != 2 or weight.shape[0] != x.shape[0]:
        raise ValueError(
            f"need x (C, L) and weight (C, W); got {tuple(x.shape)}, {tuple(weight.shape)}"
        )
    c, w = weight.shape
    if bias is not None and bias.shape != (c,):
        raise ValueError(f"bias must be ({c},); got {tuple(bias.shape)}")
    if cu_seqlens is not None and (cu_seqlens.dim() != 1 or cu_seqlens.numel() < 2):
        raise ValueError(f"cu_seqlens must be (N + 1,) with N >= 1; got {tuple(cu_seqlens.shape)}")
    if cu_seqlens is not None and cu_seqlens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"cu_seqlens must be int32/int64; got {cu_seqlens.dtype}")
    n = 1 if cu_seqlens is None else cu_seqlens.numel() - 1
    if initial_state is not None and initial_state.shape != (n, c, w - 1):
        raise ValueError(
            f"initial_state must be ({n}, {c}, {w - 1}); got {tuple(initial_state.shape)}"
        )
    if has_initial_state is not None and (initial_state is None or has_initial_state.shape != (n,)):
        raise ValueError(f"has_initial_state needs initial_state and shape ({n},)")
    return n


def causal_conv1d_varlen_initial_states(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
    *,
    block_c: int | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the causal depthwise conv of each packed sequence of x, with optional states.

    Args:
        x: (C, L) bf16/fp16/fp32, any strides; sequences packed along L.
        weight: (C, W) float taps.
        bias: (C,) float or None.
        initial_state: (N, C, W - 1) float: inputs preceding each sequence; None = zeros.
        cu_seqlens: (N + 1,) int32/int64 sequence starts, cu[0] = 0, cu[N] = L; None = one sequence.
        has_initial_state: (N,) bool: which sequences use their state (others start from zeros).
        activation: "silu"/"swish" or None.
        block_c: Channels per program (power of two); None = min(next_pow2(C), 32).
        block_t: Time steps per chunk (power of two); None = min(next_pow2(L), 32).
        num_warps: Warps per program; None = 4.

    Returns:
        out: (C, L) with x's dtype, contiguous.

    Raises:
        ValueError: The shapes do not fit or the activation is unknown.
    """
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"activation must be 'silu', 'swish' or None; got {activation!r}")
    n = _check(x, weight, bias, initial_state, cu_seqlens, has_initial_state)
    c, length = x.shape
    out = torch.empty((c, length), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    cfg = {"block_c": min(triton.next_power_of_2(c), 32), "num_warps": 4,
           "block_t": min(triton.next_power_of_2(length), 32)}  # fmt: skip
    given = {"block_c": block_c, "block_t": block_t, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    state = initial_state if initial_state is not None else x  # dummy pointer when absent
    s_strides = initial_state.stride() if initial_state is not None else (0, 0, 0)
    cu = cu_seqlens.contiguous() if cu_seqlens is not None else x  # dummy pointer when absent
    flags = has_initial_state.contiguous() if has_initial_state is not None else cu
    _causal_conv1d_varlen_kernel[(n, triton.cdiv(c, cfg["block_c"]))](
        x, weight, bias if bias is not None else weight, state, cu, flags, out,
        c, length,
        x.stride(0), x.stride(1), weight.stride(0), weight.stride(1), *s_strides,
        out.stride(0), out.stride(1),
        W=weight.shape[1], HAS_CU=cu_seqlens is not None, HAS_BIAS=bias is not None,
        HAS_STATE=initial_state is not None,
        HAS_FLAGS=has_initial_state is not None, SILU=activation is not None,
        BLOCK_C=cfg["block_c"], BLOCK_T=cfg["block_t"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return out


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    activation: str | None = "silu",
) -> torch.Tensor:
    """Convolve each sequence separately in fp32 (state or zeros prepended), then cast."""
    c, length = x.shape
    w = weight.shape[1]
    cu = [0, length] if cu_seqlens is None else cu_seqlens.tolist()
    out = torch.empty(c, length, dtype=torch.float32, device=x.device)
    for n in range(len(cu) - 1):
        a, b = cu[n], cu[n + 1]
        pre = torch.zeros(c, w - 1, device=x.device)
        if initial_state is not None and (has_initial_state is None or bool(has_initial_state[n])):
            pre = initial_state[n].float()
        xp = torch.cat([pre, x[:, a:b].float()], dim=1)
        acc = torch.zeros(c, b - a, device=x.device) if bias is None else bias.float()[:, None]
        for j in range(w):
            acc = acc + weight[:, j : j + 1].float() * xp[:, j : j + b - a]
        out[:, a:b] = acc
    if activation is not None:
        out = torch.nn.functional.silu(out)
    return out.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"dim", "seqlens": [..], "width"}``, N(0, 1) values.

    Every other sequence has its initial state switched off, so both paths run.
    """
    c, w, lens = shape["dim"], shape.get("width", 4), shape["seqlens"]
    cu = torch.tensor([0, *lens], device=device).cumsum(0).to(torch.int32)
    n = len(lens)
    return {
        "x": torch.randn(c, int(cu[-1]), device=device).to(dtype),
        "weight": torch.randn(c, w, device=device).to(dtype),
        "bias": torch.randn(c, device=device).to(dtype),
        "initial_state": torch.randn(n, c, w - 1, device=device).to(dtype),
        "cu_seqlens": cu,
        "has_initial_state": torch.arange(n, device=device) % 2 == 0,
    }
