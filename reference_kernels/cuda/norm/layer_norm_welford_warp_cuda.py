"""
---
id: layer_norm_welford_warp_cuda
title: LayerNorm in CUDA C++ with one warp per row and a Welford merge by warp shuffles
op_family: norm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [warp-per-row, welford, warp-shuffle-reduction, fp32-accumulate, load-inline]
status: reference
launcher: layer_norm_welford_warp_cuda
tuning:
  warps_per_block: [4, 1, 2, 8]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], like: x, aliases: [w, gamma]}
  bias: {shape: [N], like: x, aliases: [b, beta]}
  eps: {type: float, default: 1.0e-5, aliases: [epsilon, variance_epsilon, norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 130, hidden: 7}, {rows: 37, hidden: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
LayerNorm y = (x - mean) * rsqrt(var + eps) * w + b (biased variance) in CUDA C++ (built with
load_inline), one warp per row. Each lane runs Welford's update (count, mean, M2) over the
elements it owns (lane, lane + 32, ...), so mean and variance come from one read of the row with
no cancellation of sum(x^2) - sum(x)^2; the 32 partial states are then merged in five
__shfl_xor_sync steps with Chan's pairwise formula, after which every lane holds the row's mean
and M2. A second pass re-reads the row (an L1/L2 hit) and writes the affine output rounded once.
DRAM traffic is one read and one write per element (4 bytes per bf16 element) plus w and b, which
stay in L2; about 10 FLOPs per element (Welford costs one division per element). It wins for
narrow and medium rows (N up to a few thousand) where a block per row would idle or synchronise.
Limits: scalar loads (no vector packs), one division per element in pass 1, few loads in flight
for very wide rows (N >= 16384), and weight and bias must have x's dtype.
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

template <typename T>
__global__ void layer_norm_welford_warp_kernel(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ b,
    T* __restrict__ y, int64_t rows, int n, int64_t stride_x, int64_t stride_y, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // whole warps leave together: shuffles keep the full mask
    const T* xr = x + row * stride_x;
    T* yr = y + row * stride_y;

    // pass 1: per-lane Welford state over lane-strided elements
    float count = 0.f, mean = 0.f, m2 = 0.f;
    for (int i = lane; i < n; i += 32) {
        const float v = to_f32(xr[i]);
        count += 1.f;
        const float delta = v - mean;
        mean += delta / count;
        m2 += delta * (v - mean);
    }
    // Chan's merge of (count, mean, m2) pairs, butterfly: every lane ends with the row state
    for (int off = 16; off > 0; off >>= 1) {
        const float cb = __shfl_xor_sync(0xffffffffu, count, off);
        const float mb = __shfl_xor_sync(0xffffffffu, mean, off);
        const float m2b = __shfl_xor_sync(0xffffffffu, m2, off);
        const float c = count + cb;
        if (c > 0.f) {
            const float delta = mb - mean;
            const float fb = cb / c;
            mean += delta * fb;
            m2 += m2b + delta * delta * count * fb;
        }
        count = c;
    }
    const float rstd = rsqrtf(m2 / (float)n + eps);

    // pass 2: re-read (L1/L2 hit), affine, one rounding
    for (int i = lane; i < n; i += 32) {
        const float v = (to_f32(xr[i]) - mean) * rstd;
        yr[i] = from_f32<T>(v * to_f32(w[i]) + to_f32(b[i]));
    }
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

void layer_norm_welford_warp_launch(torch::Tensor x, torch::Tensor w, torch::Tensor b,
                                    torch::Tensor y, double eps, int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0);
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((rows + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        layer_norm_welford_warp_kernel<T><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<const T*>(w.data_ptr()),
            static_cast<const T*>(b.data_ptr()), static_cast<T*>(y.data_ptr()), rows,
            (int)x.size(1), x.stride(0), y.stride(0), (float)eps);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void layer_norm_welford_warp_launch(torch::Tensor x, torch::Tensor w, torch::Tensor b, "
    "torch::Tensor y, double eps, int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_layer_norm_welford_warp_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["layer_norm_welford_warp_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def layer_norm_welford_warp_cuda(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor,
    eps: float = 1e-5,
    *,
    warps_per_block: int | None = None,
) -> torch.Tensor:
    """Return LayerNorm(x) * weight + bias over the last dimension.

    Args:
        x: (..., N) bf16/fp16/fp32 on a CUDA device; the last dimension is made contiguous.
        weight: (N,) same dtype and device as ``x``.
        bias: (N,) same dtype and device as ``x``.
        eps: Added to the biased variance before the reciprocal square root.
        warps_per_block: Rows per block (one warp each), 1 to 32; None picks 4.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor, weight or bias does not match, or
            warps_per_block is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    n = x.shape[-1] if x.dim() else 0
    if n < 1:
        raise ValueError(f"x needs a last dimension of at least 1; got shape {tuple(x.shape)}")
    for name, t in (("weight", weight), ("bias", bias)):
        if t.shape != (n,) or t.dtype != x.dtype or t.device != x.device:
            raise ValueError(
                f"{name} must be ({n},) {x.dtype} on {x.device} for x {tuple(x.shape)}; got "
                f"{tuple(t.shape)} {t.dtype} on {t.device}"
            )
    wpb = warps_per_block or 4
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel():
        _EXT.layer_norm_welford_warp_launch(
            x2, weight.contiguous(), bias.contiguous(), y, float(eps), wpb
        )
    return y.reshape(x.shape)


def reference(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5
) -> torch.Tensor:
    """Return LayerNorm(x) * weight + bias computed in fp32 and cast to x's dtype."""
    xf = x.float()
    mean = xf.mean(dim=-1, keepdim=True)
    var = (xf - mean).pow(2).mean(dim=-1, keepdim=True)
    y = (xf - mean) * torch.rsqrt(var + eps) * weight.float() + bias.float()
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x", "weight", "bias", "eps"}`` for ``shape = {"rows", "hidden"}``.

    x ~ N(0.5, 1) (a non-zero mean exercises the centring); weight and bias ~ N(0, 1).
    """
    rows, hidden = shape["rows"], shape["hidden"]
    x = (0.5 + torch.randn(rows, hidden, device=device)).to(dtype)
    weight = torch.randn(hidden, device=device).to(dtype)
    bias = torch.randn(hidden, device=device).to(dtype)
    return {"x": x, "weight": weight, "bias": bias, "eps": 1e-5}
