"""
---
id: silu_and_mul_vec8_cuda
title: SwiGLU silu(gate) * up in CUDA C++ with 16-byte vector accesses and a grid-stride loop
op_family: activation
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [vectorized-load, grid-stride-loop, fused-gate, double-rounding, load-inline]
status: reference
launcher: silu_and_mul_vec8_cuda
tuning:
  threads: [256, 128, 512, 1024]
  blocks_per_sm: [4, 2, 8, 16]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 5, d: 13}, {rows: 33, d: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
The SwiGLU activation out = silu(gate) * up for x (..., 2d) = [gate | up] in CUDA C++ (built with
load_inline). Work is cut into 16-byte vectors of outputs (8 bf16/fp16 or 4 fp32 values): each
thread loads one uint4 of gate and one of up (LDG.128), computes in fp32 and writes one uint4 of
out (STG.128), so a warp moves 512 contiguous bytes per access. A grid-stride loop over all T * d /
8 vectors, with the grid sized to SMs x blocks_per_sm, keeps a fixed resident grid whatever T is:
no tail wave, and one decode row of d = 14336 still spreads over 1792 threads. Numerics follow the
eager expression silu(gate.float()).to(dtype) * up: fp32 SiLU rounded to the output dtype, then the
product rounded again (double rounding, on purpose). Traffic per output: 2 reads + 1 write (6 bytes
in bf16), about 5 FLOPs plus one exponential. Limits: the vector path needs d and the row strides
to be multiples of the vector width and 16-byte aligned bases, else it falls back to scalar
accesses; one division per vector to find the row; no fp8 output or fused quantisation.
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

// silu rounded to T, then the product rounded to T: the eager PyTorch expression
template <typename T>
__device__ __forceinline__ T silu_mul(T g, T u) {
    const float gf = to_f32(g);
    const T act = from_f32<T>(gf / (1.f + expf(-gf)));  // accurate expf: memory-bound anyway
    return from_f32<T>(to_f32(act) * to_f32(u));
}

// VEC elements per access: 16 / sizeof(T) on the vector path (one uint4), 1 on the scalar path
template <typename T, int VEC>
__global__ void silu_and_mul_vec8_kernel(
    const T* __restrict__ x, T* __restrict__ out,   // pointers
    int64_t rows, int64_t d,                        // sizes
    int64_t stride_x, int64_t stride_o) {           // row strides (elements)
    const int64_t vecs_per_row = d / VEC;
    const int64_t total = rows * vecs_per_row;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < total;
         v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t row = v / vecs_per_row;
        const int64_t col = (v - row * vecs_per_row) * VEC;
        const T* gate = x + row * stride_x + col;
        T* o = out + row * stride_o + col;
        if constexpr (VEC == 1) {
            o[0] = silu_mul(gate[0], gate[d]);
        } else {
            // one 16-byte load each for gate and up, one 16-byte store
            const uint4 g_raw = *reinterpret_cast<const uint4*>(gate);
            const uint4 u_raw = *reinterpret_cast<const uint4*>(gate + d);
            uint4 r_raw;
            const T* g = reinterpret_cast<const T*>(&g_raw);
            const T* u = reinterpret_cast<const T*>(&u_raw);
            T* r = reinterpret_cast<T*>(&r_raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) r[i] = silu_mul(g[i], u[i]);
            *reinterpret_cast<uint4*>(o) = r_raw;
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

void silu_and_mul_vec8_launch(torch::Tensor x, torch::Tensor out, int64_t threads,
                              int64_t blocks_per_sm) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), d = out.size(1);
    const int64_t vec = 16 / x.element_size();
    // vector path: every gate, up and out vector starts on a 16-byte boundary
    const bool vector = d % vec == 0 && x.stride(0) % vec == 0 && out.stride(0) % vec == 0 &&
                        reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0 &&
                        reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0;
    const int64_t work = rows * (vector ? d / vec : d);
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, x.get_device()));
    const int64_t wanted = (work + threads - 1) / threads;
    const dim3 grid((unsigned)std::max<int64_t>(1, std::min<int64_t>(wanted, sms * blocks_per_sm)));
    const dim3 block((unsigned)threads);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* xp = static_cast<const T*>(x.data_ptr());
        T* op = static_cast<T*>(out.data_ptr());
        if (vector) {
            silu_and_mul_vec8_kernel<T, 16 / sizeof(T)><<<grid, block, 0, stream>>>(
                xp, op, rows, d, x.stride(0), out.stride(0));
        } else {
            silu_and_mul_vec8_kernel<T, 1><<<grid, block, 0, stream>>>(
                xp, op, rows, d, x.stride(0), out.stride(0));
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void silu_and_mul_vec8_launch(torch::Tensor x, torch::Tensor out, int64_t threads, "
    "int64_t blocks_per_sm);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_silu_and_mul_vec8_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["silu_and_mul_vec8_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def silu_and_mul_vec8_cuda(
    x: torch.Tensor,
    *,
    threads: int | None = None,
    blocks_per_sm: int | None = None,
) -> torch.Tensor:
    """Return silu(gate) * up for x = [gate | up] along the last dimension.

    Args:
        x: (..., 2d) bf16/fp16/fp32 on a CUDA device, last dimension contiguous (else copied).
        threads: Threads per block, a multiple of 32 in 32..1024; None = 256.
        blocks_per_sm: Resident grid size per SM for the grid-stride loop; None = 4.

    Returns:
        out: (..., d), x's dtype, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor with an even last dimension, or a tuning value
            is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    two_d = x.shape[-1] if x.dim() else 0
    if two_d < 2 or two_d % 2:
        raise ValueError(f"x's last dimension must be even (2d, d >= 1); got {tuple(x.shape)}")
    block, per_sm = threads or 256, blocks_per_sm or 4
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {block}")
    if per_sm < 1:
        raise ValueError(f"blocks_per_sm must be at least 1; got {per_sm}")
    d = two_d // 2
    x2 = x.reshape(-1, two_d)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    if out.numel():
        _EXT.silu_and_mul_vec8_launch(x2, out, block, per_sm)
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return silu(gate.float()).to(dtype) * up, the eager PyTorch expression (double rounding)."""
    gate, up = x.chunk(2, dim=-1)
    return (torch.nn.functional.silu(gate.float()).to(x.dtype).float() * up.float()).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1)."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}
