"""
---
id: causal_conv1d_update_cuda
title: Causal conv1d decode step in CUDA C++, thread per (sequence, channel), state rolled in place
op_family: conv
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [thread-per-channel, decode-step, rolling-state, in-place, state-indices, fused-bias-silu,
   load-inline]
status: reference
launcher: causal_conv1d_update_cuda
tuning:
  threads: [128, 64, 256]
args:
  x: {shape: [B, C], dtypes: [bf16, fp16, fp32], aliases: [hidden_states]}
  conv_state: {shape: ['?', C, S], like: x, layout: any, aliases: [state, cache]}
  weight: {shape: [C, W], like: x, aliases: [conv_weight]}
  bias: {shape: [C], like: x, optional: true, aliases: [conv_bias]}
  activation: {type: str, default: silu}
  conv_state_indices: {shape: [B], dtypes: [int32], optional: true, aliases: [cache_indices]}
returns:
  - {name: out, shape: [B, C], dtype: x}
  - {name: conv_state, alias: conv_state}
problem:
  shapes: [{batch: 4, dim: 1000, width: 3, indices: [2, -1, 0, 4]}, {batch: 3, dim: 37, state_len: 6, activation: null}]
  dtypes: [fp32, bf16]
  in_place: [conv_state]
measured: []
---
One decode step of a depthwise causal conv1d (Mamba / GDN short conv, width W <= 4) in CUDA C++
(built with load_inline). Thread (b, c) owns channel c of sequence b: it reads the W - 1 newest
state taps and the new token into registers, computes bias + sum(w * window) in fp32 with the
width unrolled at compile time (W is a template argument), applies SiLU if asked, writes one output
and rolls its state row left by one slot in place, appending the token. Consecutive threads take
consecutive channels, so x, weight and out accesses coalesce; the state row (S values with stride
S between channels) is read with a stride, which caches absorb for S <= 8. Per channel: W + S + 1
reads, S + 1 writes, 2W + 5 FLOPs. It wins at decode, where the whole update is a few hundred KB
and one launch of thread-per-channel work is all the parallelism there is; a channel-tiled kernel
is no faster and a prefill needs a sequence-parallel conv instead. Limits: one token per call
(no speculative multi-token x); W in 1..4; state_len S >= max(W - 1, 1); padding slots (index
-1) skip the sequence and leave its output zero; two sequences sharing a slot race.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) {
    return __float2half_rn(v);
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// grid (channel blocks, batch); W is the conv width, S >= W - 1 the state length
template <typename T, int W>
__global__ void causal_conv1d_update_kernel(
    const T* __restrict__ x, T* __restrict__ state, const T* __restrict__ weight,
    const T* __restrict__ bias, const int* __restrict__ indices, T* __restrict__ out,
    int channels, int s_len,
    int64_t stride_xb, int64_t stride_sb, int64_t stride_sc, int64_t stride_ss,
    int64_t stride_ob, bool silu) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t b = blockIdx.y;
    if (c >= channels) return;
    const int64_t slot = indices != nullptr ? (int64_t)indices[b] : b;
    if (slot < 0) {  // padded batch entry: no state, zero output
        out[b * stride_ob + c] = from_f32<T>(0.f);
        return;
    }
    T* st = state + slot * stride_sb + (int64_t)c * stride_sc;
    const T xv = x[b * stride_xb + c];
    // window = the W - 1 newest state taps followed by the new token
    float win[W];
#pragma unroll
    for (int j = 0; j < W - 1; ++j) win[j] = to_f32(st[(int64_t)(s_len - (W - 1) + j) * stride_ss]);
    win[W - 1] = to_f32(xv);
    float acc = bias != nullptr ? to_f32(bias[c]) : 0.f;
#pragma unroll
    for (int j = 0; j < W; ++j) acc += win[j] * to_f32(weight[(int64_t)c * W + j]);
    if (silu) acc = acc / (1.f + expf(-acc));
    out[b * stride_ob + c] = from_f32<T>(acc);
    // roll the state left by one and append the token (this thread owns the row)
    for (int j = 0; j < s_len - 1; ++j) {
        st[(int64_t)j * stride_ss] = st[(int64_t)(j + 1) * stride_ss];
    }
    st[(int64_t)(s_len - 1) * stride_ss] = xv;
}
"""

_CUDA_HOST = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#define AKA_DISPATCH_FLOAT(st, T, ...)                                             \
    switch (st) {                                                                  \
        case at::ScalarType::Float: { using T = float; __VA_ARGS__; break; }       \
        case at::ScalarType::Half: { using T = __half; __VA_ARGS__; break; }       \
        case at::ScalarType::BFloat16: { using T = __nv_bfloat16; __VA_ARGS__; break; } \
        default: TORCH_CHECK(false, "unsupported dtype ", st);                     \
    }

#define AKA_LAUNCH_W(WV)                                                               \
    causal_conv1d_update_kernel<T, WV><<<grid, (unsigned)threads, 0, stream>>>(        \
        xp, sp, wp, bp, ip, op, channels, s_len, x.stride(0), state.stride(0),         \
        state.stride(1), state.stride(2), out.stride(0), silu)

void causal_conv1d_update_launch(torch::Tensor x, torch::Tensor state, torch::Tensor weight,
                                 c10::optional<torch::Tensor> bias,
                                 c10::optional<torch::Tensor> indices, torch::Tensor out,
                                 bool silu, int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int channels = (int)x.size(1);
    const int s_len = (int)state.size(2);
    const int width = (int)weight.size(1);
    const dim3 grid((unsigned)((channels + threads - 1) / threads), (unsigned)x.size(0));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int* ip = indices.has_value() ? indices->data_ptr<int>() : nullptr;
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* xp = static_cast<const T*>(x.data_ptr());
        T* sp = static_cast<T*>(state.data_ptr());
        const T* wp = static_cast<const T*>(weight.data_ptr());
        const T* bp = bias.has_value() ? static_cast<const T*>(bias->data_ptr()) : nullptr;
        T* op = static_cast<T*>(out.data_ptr());
        switch (width) {
            case 1: AKA_LAUNCH_W(1); break;
            case 2: AKA_LAUNCH_W(2); break;
            case 3: AKA_LAUNCH_W(3); break;
            case 4: AKA_LAUNCH_W(4); break;
            default: TORCH_CHECK(false, "conv width must be 1..4, got ", width);
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void causal_conv1d_update_launch(torch::Tensor x, torch::Tensor state, torch::Tensor weight, "
    "c10::optional<torch::Tensor> bias, c10::optional<torch::Tensor> indices, torch::Tensor out, "
    "bool silu, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_causal_conv1d_update_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["causal_conv1d_update_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def causal_conv1d_update_cuda(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    conv_state_indices: torch.Tensor | None = None,
    *,
    threads: int = 128,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run one conv1d decode step; ``conv_state`` is updated in place.

    Args:
        x: (B, C) new tokens, bf16/fp16/fp32 on a CUDA device.
        conv_state: (slots, C, S) state pool of x's dtype, S >= max(W - 1, 1), any strides.
        weight: (C, W) depthwise taps of x's dtype, W in 1..4.
        bias: optional (C,) of x's dtype.
        activation: "silu" or None.
        conv_state_indices: optional (B,) int32 state slot per sequence (-1 = padding); None
            means slot b for sequence b.
        threads: Threads (channels) per block, a multiple of 32 in 32..1024.

    Returns:
        (out, conv_state): out (B, C) in x's dtype, and the updated state (the same tensor).

    Raises:
        ValueError: a tensor has the wrong shape, dtype or device, or an option is invalid.
    """
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2:
        raise ValueError(f"x must be a (B, C) CUDA float tensor; got {x.dtype} {tuple(x.shape)}")
    b, c = x.shape
    if weight.dim() != 2 or weight.shape[0] != c or not 1 <= weight.shape[1] <= 4:
        raise ValueError(f"weight must be (C={c}, W) with W in 1..4; got {tuple(weight.shape)}")
    width = weight.shape[1]
    s_min = max(width - 1, 1)
    if conv_state.dim() != 3 or conv_state.shape[1] != c or conv_state.shape[2] < s_min:
        raise ValueError(
            f"conv_state must be (slots, {c}, S >= {s_min}); got {tuple(conv_state.shape)}"
        )
    if conv_state_indices is None and conv_state.shape[0] < b:
        raise ValueError(f"conv_state has {conv_state.shape[0]} slots for a batch of {b}")
    tensors = {"conv_state": conv_state, "weight": weight, "bias": bias}
    for name, t in tensors.items():
        if t is not None and (t.dtype != x.dtype or t.device != x.device):
            raise ValueError(f"{name} must be {x.dtype} on {x.device}; got {t.dtype} on {t.device}")
    if bias is not None and bias.shape != (c,):
        raise ValueError(f"bias must be ({c},); got {tuple(bias.shape)}")
    idx = conv_state_indices
    if idx is not None and (
        idx.dtype != torch.int32 or idx.shape != (b,) or idx.device != x.device
    ):
        raise ValueError(f"conv_state_indices must be ({b},) int32 on {x.device}")
    if activation not in ("silu", None):
        raise ValueError(f"activation must be 'silu' or None; got {activation!r}")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads}")
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel() > 0:
        _EXT.causal_conv1d_update_launch(
            x if x.stride(1) == 1 else x.contiguous(),
            conv_state,
            weight.contiguous(),
            None if bias is None else bias.contiguous(),
            None if idx is None else idx.contiguous(),
            out,
            activation == "silu",
            threads,
        )
    return out, conv_state


def reference(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    conv_state_indices: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return (out, conv_state) in fp32 PyTorch; conv_state rolled in place, as by the launcher."""
    state = conv_state
    width, s_len = weight.shape[1], conv_state.shape[2]
    slots = list(range(x.shape[0])) if conv_state_indices is None else conv_state_indices.tolist()
    out = torch.zeros_like(x)
    for b, slot in enumerate(slots):
        if slot < 0:
            continue
        window = torch.cat(
            [state[slot, :, s_len - (width - 1) :].float(), x[b, :, None].float()], 1
        )
        acc = (window * weight.float()).sum(-1) + (0.0 if bias is None else bias.float())
        out[b] = (acc if activation is None else torch.nn.functional.silu(acc)).to(x.dtype)
        state[slot] = torch.cat([state[slot, :, 1:], x[b, :, None]], dim=1)
    return out, conv_state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return kwargs for ``{"batch", "dim"}`` (+ ``"width"`` 4, ``"state_len"`` W - 1).

    ``"indices"`` (a list of slots, -1 = padding) adds conv_state_indices and two spare slots;
    every tensor is N(0, 1) * 0.5 in ``dtype``.
    """
    b, dim, width = shape["batch"], shape["dim"], shape.get("width", 4)
    state_len, idx = shape.get("state_len", width - 1), shape.get("indices")
    slots = len(idx) + 2 if idx is not None else b
    return {
        "x": (torch.randn(b, dim, device=device) * 0.5).to(dtype),
        "conv_state": (torch.randn(slots, dim, state_len, device=device) * 0.5).to(dtype),
        "weight": (torch.randn(dim, width, device=device) * 0.5).to(dtype),
        "bias": (torch.randn(dim, device=device) * 0.5).to(dtype),
        "activation": shape.get("activation", "silu"),
        "conv_state_indices": None
        if idx is None
        else torch.tensor(idx, dtype=torch.int32, device=device),
    }
