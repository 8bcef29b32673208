"""
---
id: transpose_tiled_smem_cuda
title: 2-D transpose in CUDA C++ through a 32x33 shared-memory tile (padding kills bank conflicts)
op_family: other
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [smem-tile-transpose, bank-conflict-padding, coalesced-load-store, batched-grid-z, load-inline]
status: reference
launcher: transpose_tiled_smem_cuda
tuning:
  rows_per_pass: [8, 4, 16, 32]
args:
  x: {shape: [..., M, N], dtypes: [bf16, fp16, fp32], layout: any, aliases: [input]}
returns:
  - {name: y, shape: [..., N, M], dtype: x}
problem:
  shapes: [{batch: 3, m: 33, n: 65}, {m: 1, n: 7}]
  dtypes: [fp32, bf16]
measured: []
---
Contiguous transpose y[b, j, i] = x[b, i, j] of the last two dimensions in CUDA C++ (built with
load_inline). Each block owns a 32x32 tile: 32 x ROWS threads read it row by row (each warp one
coalesced 32-element run of x), write it into a __shared__ T tile[32][33], synchronise once, and
read it back column-wise to write coalesced runs of y. The extra column makes the column read hit
32 different banks (stride 33 words for fp32) instead of one bank 32 times. Batched inputs use
gridDim.z. DRAM traffic is one read and one write per element, no FLOPs: a pure bandwidth kernel,
and the coalesced store is what wins over a naive strided copy (which writes 32 sectors per warp
instead of one or two). Limits: 16-bit types still see two-way conflicts on the column read (two
elements per bank word); edge tiles are masked; the input is made contiguous first, so a
transposed view pays one extra copy; grid.y and grid.z are limited to 65535 tiles and batches.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#define TILE 32

// block (32, ROWS): thread (tx, ty) handles rows ty, ty + ROWS, ... of the 32x32 tile
template <typename T>
__global__ void transpose_tiled_smem_kernel(const T* __restrict__ x, T* __restrict__ y, int m,
                                            int n) {
    __shared__ T tile[TILE][TILE + 1];  // +1 column: column reads hit 32 distinct banks
    const int64_t batch_off = (int64_t)blockIdx.z * m * n;
    const T* xb = x + batch_off;
    T* yb = y + batch_off;
    const int tx = threadIdx.x, rows = blockDim.y;
    const int col = blockIdx.x * TILE + tx;  // column of x read by this thread
    for (int r = threadIdx.y; r < TILE; r += rows) {
        const int row = blockIdx.y * TILE + r;
        if (row < m && col < n) tile[r][tx] = xb[(int64_t)row * n + col];
    }
    __syncthreads();
    const int out_col = blockIdx.y * TILE + tx;  // column of y == row of x
    for (int r = threadIdx.y; r < TILE; r += rows) {
        const int out_row = blockIdx.x * TILE + r;  // row of y == column of x
        if (out_row < n && out_col < m) yb[(int64_t)out_row * m + out_col] = tile[tx][r];
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

void transpose_tiled_smem_launch(torch::Tensor x, torch::Tensor y, int64_t rows_per_pass) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t batch = x.size(0);
    const int m = (int)x.size(1), n = (int)x.size(2);
    const dim3 block(32, (unsigned)rows_per_pass);
    const dim3 grid((unsigned)((n + 31) / 32), (unsigned)((m + 31) / 32), (unsigned)batch);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        transpose_tiled_smem_kernel<T><<<grid, block, 0, stream>>>(
            static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), m, n);
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void transpose_tiled_smem_launch(torch::Tensor x, torch::Tensor y, int64_t rows_per_pass);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_transpose_tiled_smem_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["transpose_tiled_smem_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def transpose_tiled_smem_cuda(x: torch.Tensor, *, rows_per_pass: int = 8) -> torch.Tensor:
    """Return a contiguous copy of ``x`` with its last two dimensions swapped.

    Args:
        x: (..., M, N) bf16/fp16/fp32 on a CUDA device (any layout; copied to contiguous).
        rows_per_pass: Thread rows per block (block = 32 x rows_per_pass), one of 1..32 dividing 32.

    Returns:
        y: (..., N, M), x's dtype, contiguous.

    Raises:
        ValueError: x is not a CUDA float tensor with at least 2 dimensions, rows_per_pass is
            invalid, or the tile grid exceeds CUDA's 65535 limit on grid.y / grid.z.
    """
    if not x.is_cuda or x.dtype not in _DTYPES:
        raise ValueError(f"x must be a CUDA fp32/fp16/bf16 tensor; got {x.dtype} on {x.device}")
    if x.dim() < 2:
        raise ValueError(f"x must have at least 2 dimensions; got shape {tuple(x.shape)}")
    if rows_per_pass not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"rows_per_pass must be 1, 2, 4, 8, 16 or 32; got {rows_per_pass}")
    m, n = x.shape[-2], x.shape[-1]
    x3 = x.reshape(-1, m, n).contiguous()
    if x3.shape[0] > 65535 or (m + 31) // 32 > 65535:
        raise ValueError(
            f"batch {x3.shape[0]} and M/32 {(m + 31) // 32} must be at most 65535 (grid limits)"
        )
    y = torch.empty((x3.shape[0], n, m), dtype=x.dtype, device=x.device)
    if y.numel() > 0:
        _EXT.transpose_tiled_smem_launch(x3, y, rows_per_pass)
    return y.reshape(*x.shape[:-2], n, m)


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return x.transpose(-1, -2) as a contiguous copy."""
    return x.transpose(-1, -2).contiguous()


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"x"}`` for ``shape = {"m", "n"}`` and optional ``"batch"``: x ~ N(0, 1)."""
    dims = ((shape["batch"],) if "batch" in shape else ()) + (shape["m"], shape["n"])
    return {"x": torch.randn(dims, device=device).to(dtype)}
