"""
---
id: argmax_rowwise_cuda
title: Greedy argmax per row in CUDA C++, block reduction of packed 64-bit (value, index) keys
op_family: sampling
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-row, packed-key-reduction, warp-shuffle-reduction, order-preserving-float-bits,
   lowest-index-tie-break, load-inline]
status: reference
launcher: argmax_rowwise_cuda
tuning:
  threads: [512, 128, 256, 1024]
args:
  logits: {shape: [T, V], dtypes: [bf16, fp16, fp32], aliases: [x, scores]}
returns:
  - {name: next_tokens, shape: [T], dtype: int64}
problem:
  shapes: [{rows: 3, vocab: 5}, {rows: 33, vocab: 1000}]
  dtypes: [fp32, bf16]
measured: []
---
Greedy sampling in CUDA C++ (built with load_inline): the index of the largest logit of every row,
ties to the lowest index, NaN counted as the largest value (as torch.argmax). One block per row.
Each (value, column) pair is packed into one unsigned 64-bit key: the high 32 bits are the fp32
value's bits made order-preserving (flip all bits of negatives, the sign bit of positives; NaN maps
to the top), the low 32 bits are ~column, so the largest key is the largest value at the lowest
column and one integer max does the whole comparison. Each thread keeps the max key over its
strided columns, warps reduce with five 64-bit __shfl_xor_sync steps, warp winners meet in shared
memory and warp 0 reduces them. Bytes: the logit row is read once (2 bytes per logit in bf16) and 8
bytes are written per row; a handful of integer ops per logit. It wins for decode batches with
wide vocabularies (32K-256K), where one block per row keeps enough loads in flight. Limits: few
rows fill few SMs (a split-row pass would combine per-split winners, which the packed key makes
easy); scalar loads; V < 2^31.
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

// order-preserving key: larger value -> larger key; equal values -> the lower column wins
__device__ __forceinline__ unsigned long long pack_key(float v, int col) {
    unsigned int bits = __float_as_uint(v == 0.f ? 0.f : v);  // -0 ties with +0, as in torch
    bits = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    if (v != v) bits = 0xffffffffu;  // every NaN ranks above +inf, as in torch.argmax
    return ((unsigned long long)bits << 32) | (unsigned int)(~(unsigned int)col);
}

// THREADS is a multiple of 32 (at most 1024, so at most 32 warp slots)
template <typename T>
__global__ void argmax_rowwise_kernel(
    const T* __restrict__ logits, int64_t* __restrict__ out,  // pointers
    int v, int64_t stride_row) {                               // vocab, row stride (elements)
    __shared__ unsigned long long warp_best[32];
    const int64_t row = blockIdx.x;  // int64: row * stride can pass 2^31 elements
    const T* xr = logits + row * stride_row;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

    unsigned long long best = 0;  // below every real key: their high word is never 0
    for (int c = tid; c < v; c += blockDim.x) {
        const unsigned long long key = pack_key(to_f32(xr[c]), c);
        best = key > best ? key : best;
    }
    for (int off = 16; off > 0; off >>= 1) {
        const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, off);
        best = other > best ? other : best;
    }
    if (lane == 0) warp_best[warp] = best;
    __syncthreads();
    if (warp == 0) {
        best = lane < (int)(blockDim.x >> 5) ? warp_best[lane] : 0ull;
        for (int off = 16; off > 0; off >>= 1) {
            const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, off);
            best = other > best ? other : best;
        }
        if (lane == 0) out[row] = (int64_t)(~(unsigned int)(best & 0xffffffffull));
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

void argmax_rowwise_launch(torch::Tensor logits, torch::Tensor out, int64_t threads) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(logits.scalar_type(), T, {
        argmax_rowwise_kernel<T><<<(unsigned)logits.size(0), (unsigned)threads, 0, stream>>>(
            static_cast<const T*>(logits.data_ptr()), static_cast<int64_t*>(out.data_ptr()),
            (int)logits.size(1), logits.stride(0));
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = "void argmax_rowwise_launch(torch::Tensor logits, torch::Tensor out, int64_t threads);"
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_argmax_rowwise_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["argmax_rowwise_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def argmax_rowwise_cuda(logits: torch.Tensor, *, threads: int | None = None) -> torch.Tensor:
    """Return the index of the largest logit of each row (lowest index on ties, NaN largest).

    Args:
        logits: (T, V) bf16/fp16/fp32 on a CUDA device, 1 <= V < 2^31, last dimension
            contiguous (else copied).
        threads: Threads per row block, a multiple of 32 in 32..1024; None = 512.

    Returns:
        next_tokens: (T,) int64.

    Raises:
        ValueError: logits is not a 2-D CUDA float tensor with V >= 1, or threads is out of
            range.
    """
    if not logits.is_cuda or logits.dtype not in _DTYPES or logits.dim() != 2:
        raise ValueError(
            f"logits must be a 2-D CUDA fp32/fp16/bf16 tensor; got {logits.dtype} "
            f"{tuple(logits.shape)} on {logits.device}"
        )
    rows, vocab = logits.shape
    if not 1 <= vocab < 2**31:
        raise ValueError(f"the vocabulary must hold 1..2^31-1 logits; got {tuple(logits.shape)}")
    block = threads or 512
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {block}")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    out = torch.empty((rows,), dtype=torch.int64, device=logits.device)
    if rows:
        _EXT.argmax_rowwise_launch(logits, out, block)
    return out


def reference(logits: torch.Tensor) -> torch.Tensor:
    """Return torch.argmax over the last dimension (ties to the lowest index)."""
    return torch.argmax(logits.float(), dim=-1)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cuda") -> dict:
    """Return ``{"logits"}`` for ``shape = {"rows", "vocab"}``; N(0, 1) logits."""
    return {"logits": torch.randn(shape["rows"], shape["vocab"], device=device).to(dtype)}
