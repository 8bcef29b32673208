"""
---
id: moe_sum_reduce_vec_cuda
title: MoE top-k output sum in CUDA C++ with 16-byte vector loads and a grid-stride loop
op_family: moe
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [vectorized-load, grid-stride-loop, fp32-accumulate, load-inline]
status: reference
launcher: moe_sum_reduce_vec_cuda
tuning:
  threads: [256, 128, 512]
  blocks_per_sm: [4, 2, 8]
args:
  expert_outputs: {shape: [T, K, H], dtypes: [bf16, fp16, fp32], aliases: [x, input]}
  routed_scaling_factor: {type: float, default: 1.0, aliases: [scaling_factor]}
returns:
  - {name: out, shape: [T, H], dtype: expert_outputs}
problem:
  shapes: [{tokens: 7, top_k: 3, hidden: 200}, {tokens: 5, top_k: 8, hidden: 97, factor: 2.5}]
  dtypes: [fp32, bf16]
measured: []
---
The combine step after a fused MoE GEMM (atrex30 moe_sum_reduce) in CUDA C++ (built with
load_inline): out[t] = routed_scaling_factor * sum_j expert_outputs[t, j], accumulated in fp32 and
rounded once. Work is cut into 16-byte output vectors (8 bf16/fp16 or 4 fp32 values); each thread
takes one vector, loads the K matching uint4 vectors of its token (LDG.128, K independent loads in
flight), adds them in fp32 registers and stores one uint4. A grid-stride loop over all T * H / 8
vectors with the grid sized to SMs x blocks_per_sm gives a fixed resident grid with no tail wave.
Bytes per output element in bf16: 2K read and 2 written (18 bytes for K = 8), K FLOPs; purely
bandwidth-bound, so the 16-byte accesses (4x fewer instructions than 4-byte ones) are what count.
Limits: the vector path needs H and the row strides to be multiples of the vector width and
16-byte aligned bases, else it falls back to scalar accesses; one 64-bit division per vector to
find the token; the sum order is j = 0..K-1, which may differ from torch's in the last fp32 bit.
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

// VEC elements per access: 16 / sizeof(T) on the vector path (one uint4), 1 on the scalar path
template <typename T, int VEC>
__global__ void moe_sum_reduce_vec_kernel(
    const T* __restrict__ x, T* __restrict__ out, int64_t tokens, int k, int64_t h,
    int64_t stride_t, int64_t stride_k, int64_t stride_o, float factor) {
    const int64_t vecs_per_row = h / VEC;
    const int64_t total = tokens * vecs_per_row;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < total;
         v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = v / vecs_per_row;
        const int64_t col = (v - t * vecs_per_row) * VEC;
        const T* src = x + t * stride_t + col;
        T* dst = out + t * stride_o + col;
        float acc[VEC];
#pragma unroll
        for (int i = 0; i < VEC; ++i) acc[i] = 0.f;
        for (int j = 0; j < k; ++j) {
            if constexpr (VEC == 1) {
                acc[0] += to_f32(src[j * stride_k]);
            } else {
                const uint4 raw = *reinterpret_cast<const uint4*>(src + j * stride_k);
                const T* vals = reinterpret_cast<const T*>(&raw);
#pragma unroll
                for (int i = 0; i < VEC; ++i) acc[i] += to_f32(vals[i]);
            }
        }
        if constexpr (VEC == 1) {
            dst[0] = from_f32<T>(acc[0] * factor);
        } else {
            uint4 raw;
            T* vals = reinterpret_cast<T*>(&raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) vals[i] = from_f32<T>(acc[i] * factor);
            *reinterpret_cast<uint4*>(dst) = raw;
        }
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

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void moe_sum_reduce_vec_launch(torch::Tensor x, torch::Tensor out, double factor,
                               int64_t threads, int64_t blocks_per_sm) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t tokens = x.size(0), h = x.size(2);
    const int k = (int)x.size(1);
    const int vec = 16 / (int)x.element_size();
    const bool vector = h % vec == 0 && x.stride(0) % vec == 0 && x.stride(1) % vec == 0 &&
                        out.stride(0) % vec == 0 && aligned16(x.data_ptr()) &&
                        aligned16(out.data_ptr());
    const int64_t work = tokens * (vector ? h / vec : h);
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
    const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, sms * blocks_per_sm);
    const dim3 grid((unsigned)std::max<int64_t>(blocks, 1)), block((unsigned)threads);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* xp = static_cast<const T*>(x.data_ptr());
        T* op = static_cast<T*>(out.data_ptr());
        if (vector) {
            moe_sum_reduce_vec_kernel<T, 16 / sizeof(T)><<<grid, block, 0, stream>>>(
                xp, op, tokens, k, h, x.stride(0), x.stride(1), out.stride(0), (float)factor);
        } else {
            moe_sum_reduce_vec_kernel<T, 1><<<grid, block, 0, stream>>>(
                xp, op, tokens, k, h, x.stride(0), x.stride(1), out.stride(0), (float)factor);
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void moe_sum_reduce_vec_launch(torch::Tensor x, torch::Tensor out, double factor, "
    "int64_t threads, int64_t blocks_per_sm);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_moe_sum_reduce_vec_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["moe_sum_reduce_vec_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def moe_sum_reduce_vec_cuda(
    expert_outputs: torch.Tensor,
    routed_scaling_factor: float = 1.0,
    *,
    threads: int = 256,
    blocks_per_sm: int = 4,
) -> torch.Tensor:
    """Return routed_scaling_factor * expert_outputs.sum(dim=1), accumulated in fp32.

    Args:
        expert_outputs: (T, K, H) bf16/fp16/fp32 on a CUDA device; H is made contiguous.
        routed_scaling_factor: Multiplies the fp32 sum before the single rounding.
        threads: Threads per block, a multiple of 32 in 32..1024.
        blocks_per_sm: Resident blocks per SM for the grid-stride loop, 1 to 32.

    Returns:
        out: (T, H), expert_outputs' dtype.

    Raises:
        ValueError: expert_outputs is not a 3-D CUDA float tensor, or a launch setting is out
            of range.
    """
    x = expert_outputs
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 3 or x.shape[1] < 1:
        raise ValueError(
            f"expert_outputs must be a (T, K >= 1, H) CUDA fp32/fp16/bf16 tensor; got {x.dtype} "
            f"{tuple(x.shape)} on {x.device}"
        )
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads}")
    if not 1 <= blocks_per_sm <= 32:
        raise ValueError(f"blocks_per_sm must be in 1..32; got {blocks_per_sm}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    out = torch.empty((x.shape[0], x.shape[2]), dtype=x.dtype, device=x.device)
    if out.numel():
        _EXT.moe_sum_reduce_vec_launch(x, out, float(routed_scaling_factor), threads, blocks_per_sm)
    return out


def reference(expert_outputs: torch.Tensor, routed_scaling_factor: float = 1.0) -> torch.Tensor:
    """Return the fp32 sum over K times the factor, rounded once to the input dtype."""
    summed = expert_outputs.float().sum(dim=1)
    return (summed * routed_scaling_factor).to(expert_outputs.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return the launcher's kwargs for ``shape = {"tokens", "top_k", "hidden"[, "factor"]}``:
    N(0, 1) expert outputs (atrex30's choice)."""
    x = torch.randn(shape["tokens"], shape["top_k"], shape["hidden"], device=device).to(dtype)
    return {"expert_outputs": x, "routed_scaling_factor": shape.get("factor", 1.0)}
