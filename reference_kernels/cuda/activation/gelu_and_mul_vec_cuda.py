"""
---
id: gelu_and_mul_vec_cuda
title: GeGLU gelu_tanh(gate) * up in CUDA C++ with 16-byte vector accesses and a 2-D grid
op_family: activation
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [vectorized-load, fused-gate, fp32-accumulate, load-inline]
status: reference
launcher: gelu_and_mul_vec_cuda
tuning:
  threads: [128, 256, 512]
args:
  x: {shape: [..., 2*D], dtypes: [bf16, fp16, fp32], aliases: [input, gate_up]}
returns:
  - {name: out, shape: [..., D], dtype: x}
problem:
  shapes: [{rows: 5, d: 13}, {rows: 33, d: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
The GeGLU activation out = gelu_tanh(gate) * up for x (..., 2d) = [gate | up] in CUDA C++ (built
with load_inline), with gelu_tanh(a) = 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))) computed in
fp32 with tanhf and the product rounded once. Work is cut into 16-byte vectors of outputs (8
bf16/fp16 or 4 fp32 values): a thread loads one uint4 of gate and one of up (LDG.128) and stores
one uint4 of out (STG.128). The grid is 2-D, blockIdx.y the row and blockIdx.x a chunk of the
row's vectors, so a thread finds its row and column with no division; rows beyond 65535 loop
over blockIdx.y with a stride. Traffic per output: 2 reads + 1 write (6 bytes in bf16); about 12
FLOPs plus one tanh per output. It wins for the wide FFN rows of GeGLU models (d = 8192..24576)
where each row alone fills many blocks. Limits: the vector path needs d and the row strides to be
multiples of the vector width and 16-byte aligned bases, else scalar accesses; a short row
(d < 8 * threads) leaves most of a block idle; only the tanh form (not erf).
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

__device__ __forceinline__ float gelu_tanh_mul(float a, float b) {
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float inner = k0 * (a + 0.044715f * a * a * a);
    return 0.5f * a * (1.f + tanhf(inner)) * b;
}

// VEC elements per access: 16 / sizeof(T) on the vector path (one uint4), 1 on the scalar path
template <typename T, int VEC>
__global__ void gelu_and_mul_vec_kernel(const T* __restrict__ x, T* __restrict__ out,
                                        int64_t rows, int64_t d, int64_t stride_x,
                                        int64_t stride_o) {
    const int64_t col = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * VEC;
    if (col >= d) return;
    for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
        const T* gate = x + row * stride_x + col;
        T* o = out + row * stride_o + col;
        if constexpr (VEC == 1) {
            o[0] = from_f32<T>(gelu_tanh_mul(to_f32(gate[0]), to_f32(gate[d])));
        } else {
            const uint4 g_raw = *reinterpret_cast<const uint4*>(gate);
            const uint4 u_raw = *reinterpret_cast<const uint4*>(gate + d);
            const T* g = reinterpret_cast<const T*>(&g_raw);
            const T* u = reinterpret_cast<const T*>(&u_raw);
            uint4 r_raw;
            T* r = reinterpret_cast<T*>(&r_raw);
#pragma unroll
            for (int i = 0; i < VEC; ++i) {
                r[i] = from_f32<T>(gelu_tanh_mul(to_f32(g[i]), to_f32(u[i])));
            }
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

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

void gelu_and_mul_vec_launch(torch::Tensor x, torch::Tensor out, int64_t threads) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0), d = out.size(1);
    const int vec = 16 / (int)x.element_size();
    const bool vector = d % vec == 0 && x.stride(0) % vec == 0 && out.stride(0) % vec == 0 &&
                        aligned16(x.data_ptr()) && aligned16(out.data_ptr());
    const int64_t per_row = vector ? d / vec : d;
    const dim3 grid((unsigned)((per_row + threads - 1) / threads),
                    (unsigned)std::min<int64_t>(rows, 65535));
    const dim3 block((unsigned)threads);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* xp = static_cast<const T*>(x.data_ptr());
        T* op = static_cast<T*>(out.data_ptr());
        if (vector) {
            gelu_and_mul_vec_kernel<T, 16 / sizeof(T)><<<grid, block, 0, stream>>>(
                xp, op, rows, d, x.stride(0), out.stride(0));
        } else {
            gelu_and_mul_vec_kernel<T, 1><<<grid, block, 0, stream>>>(
                xp, op, rows, d, x.stride(0), out.stride(0));
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = "void gelu_and_mul_vec_launch(torch::Tensor x, torch::Tensor out, int64_t threads);"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_gelu_and_mul_vec_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["gelu_and_mul_vec_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def gelu_and_mul_vec_cuda(x: torch.Tensor, *, threads: int = 128) -> torch.Tensor:
    """Return gelu_tanh(x[..., :d]) * x[..., d:] computed in fp32 and rounded once.

    Args:
        x: (..., 2d) bf16/fp16/fp32 on a CUDA device; the last dimension is made contiguous.
        threads: Threads per block, a multiple of 32 in 32..1024.

    Returns:
        out: (..., d), x's dtype, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor with an even, non-zero last dimension, or
            threads is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    width = x.shape[-1] if x.dim() else 0
    if width < 2 or width % 2:
        raise ValueError(f"x's last dimension must be even and >= 2; got shape {tuple(x.shape)}")
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads}")
    d = width // 2
    x2 = x.reshape(-1, width)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty((x2.shape[0], d), dtype=x.dtype, device=x.device)
    if out.numel():
        _EXT.gelu_and_mul_vec_launch(x2, out, threads)
    return out.reshape(*x.shape[:-1], d)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return gelu_tanh(gate) * up in fp32, rounded once to x's dtype."""
    d = x.shape[-1] // 2
    xf = x.float()
    gate = torch.nn.functional.gelu(xf[..., :d], approximate="tanh")
    return (gate * xf[..., d:]).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "d"}``: x (rows, 2d) ~ N(0, 1)."""
    return {"x": torch.randn(shape["rows"], 2 * shape["d"], device=device).to(dtype)}
