"""
---
id: embedding_gather_vec_cuda
title: Token embedding gather in CUDA C++ with 16-byte vector copies and a grid-stride loop
op_family: embedding
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int32, int64]
bound: memory
techniques: [vectorized-load, grid-stride-loop, gather, load-inline]
status: reference
launcher: embedding_gather_vec_cuda
tuning:
  threads: [256, 128, 512]
  blocks_per_sm: [4, 2, 8]
args:
  ids: {shape: [...], dtypes: [int32, int64], aliases: [input_ids, indices, input]}
  weight: {shape: [V, H], dtypes: [bf16, fp16, fp32], aliases: [embedding, table]}
returns:
  - {name: out, shape: [..., H], dtype: weight}
problem:
  shapes: [{tokens: 9, vocab: 50, hidden: 7}, {tokens: 37, vocab: 1000, hidden: 1000, id_dtype: int64}]
  dtypes: [fp32, bf16]
measured: []
---
The token embedding lookup out[t] = weight[ids[t]] in CUDA C++ (built with load_inline). A pure
copy, so the kernel moves bytes, not values: when a table row is a multiple of 16 bytes and the
bases are 16-byte aligned, each thread copies one uint4 (8 bf16 or 4 fp32 values) per step with
one LDG.128 and one STG.128, otherwise it copies single elements (2 or 4 bytes). A grid-stride
loop over all T * (row bytes / 16) vectors, with the grid sized to SMs x blocks_per_sm, keeps a
fixed resident grid; consecutive threads copy consecutive vectors of one row, so each warp reads
512 contiguous bytes of the table. Each thread reads its token's id (an L1 hit shared by the
row's threads). Traffic: H * bytes read and written per token plus the ids; no FLOPs. It wins for
large decode and prefill batches with wide rows (H = 2048..8192) where the gather is
bandwidth-bound. Limits: ids outside [0, V) are not checked on the host (that needs a device
sync) and give an all-zero row instead of an error; one 64-bit division per vector to find the
token; no vocab-parallel (sharded) masking or padding_idx.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <stdint.h>

// E: an unsigned type of the copy width (uint4 for 16 bytes, or the element's size);
// row_units: units of E per table row; I: the id type (int32_t or int64_t)
template <typename E, typename I>
__global__ void embedding_gather_vec_kernel(const I* __restrict__ ids, const E* __restrict__ w,
                                            E* __restrict__ out, int64_t tokens,
                                            int64_t row_units, int64_t vocab) {
    const int64_t total = tokens * row_units;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v < total;
         v += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = v / row_units;
        const int64_t col = v - t * row_units;
        const int64_t id = (int64_t)ids[t];
        E value;
        if (id >= 0 && id < vocab) {
            value = w[id * row_units + col];
        } else {
            value = E{};  // out of range: a zero row, never a wild read
        }
        out[v] = value;
    }
}
"""

_CUDA_HOST = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

static bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <typename E>
static void launch_units(torch::Tensor ids, torch::Tensor w, torch::Tensor out,
                         int64_t row_units, dim3 grid, dim3 block, cudaStream_t stream) {
    const int64_t tokens = ids.numel(), vocab = w.size(0);
    E* op = static_cast<E*>(out.data_ptr());
    const E* wp = static_cast<const E*>(w.data_ptr());
    if (ids.scalar_type() == at::ScalarType::Int) {
        embedding_gather_vec_kernel<E, int32_t><<<grid, block, 0, stream>>>(
            static_cast<const int32_t*>(ids.data_ptr()), wp, op, tokens, row_units, vocab);
    } else {
        embedding_gather_vec_kernel<E, int64_t><<<grid, block, 0, stream>>>(
            static_cast<const int64_t*>(ids.data_ptr()), wp, op, tokens, row_units, vocab);
    }
}

void embedding_gather_vec_launch(torch::Tensor ids, torch::Tensor w, torch::Tensor out,
                                 int64_t threads, int64_t blocks_per_sm) {
    const c10::cuda::CUDAGuard guard(w.device());
    const int64_t row_bytes = w.size(1) * w.element_size();
    const bool vector = row_bytes % 16 == 0 && aligned16(w.data_ptr()) && aligned16(out.data_ptr());
    const int64_t row_units = vector ? row_bytes / 16 : w.size(1);
    const int64_t work = ids.numel() * row_units;
    int sms = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, w.get_device()));
    const int64_t blocks = std::min<int64_t>((work + threads - 1) / threads, sms * blocks_per_sm);
    const dim3 grid((unsigned)std::max<int64_t>(blocks, 1)), block((unsigned)threads);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    if (vector) {
        launch_units<uint4>(ids, w, out, row_units, grid, block, stream);
    } else if (w.element_size() == 2) {
        launch_units<uint16_t>(ids, w, out, row_units, grid, block, stream);
    } else {
        launch_units<uint32_t>(ids, w, out, row_units, grid, block, stream);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void embedding_gather_vec_launch(torch::Tensor ids, torch::Tensor w, torch::Tensor out, "
    "int64_t threads, int64_t blocks_per_sm);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_ID_DTYPES = (torch.int32, torch.int64)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_embedding_gather_vec_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["embedding_gather_vec_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def embedding_gather_vec_cuda(
    ids: torch.Tensor,
    weight: torch.Tensor,
    *,
    threads: int = 256,
    blocks_per_sm: int = 4,
) -> torch.Tensor:
    """Return weight[ids]: one table row per id.

    Args:
        ids: int32/int64 ids of any shape on the table's device, each in [0, V) (ids outside
            give zero rows; they are not checked on the host).
        weight: (V, H) bf16/fp16/fp32 table on a CUDA device; made contiguous if it is not.
        threads: Threads per block, a multiple of 32 in 32..1024.
        blocks_per_sm: Resident blocks per SM for the grid-stride loop, 1 to 32.

    Returns:
        out: (*ids.shape, H), weight's dtype.

    Raises:
        ValueError: the table is not a 2-D CUDA float tensor, the ids are not int32/int64 on
            its device, or a launch setting is out of range.
    """
    if not weight.is_cuda or weight.dtype not in _DTYPES or weight.dim() != 2:
        raise ValueError(
            f"weight must be a 2-D CUDA fp32/fp16/bf16 table; got {weight.dtype} "
            f"{tuple(weight.shape)} on {weight.device}"
        )
    if ids.dtype not in _ID_DTYPES or ids.device != weight.device:
        raise ValueError(
            f"ids must be int32/int64 on {weight.device}; got {ids.dtype} on {ids.device}"
        )
    if threads % 32 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {threads}")
    if not 1 <= blocks_per_sm <= 32:
        raise ValueError(f"blocks_per_sm must be in 1..32; got {blocks_per_sm}")
    weight = weight if weight.is_contiguous() else weight.contiguous()
    flat = ids.reshape(-1).contiguous()
    out = torch.empty((flat.numel(), weight.shape[1]), dtype=weight.dtype, device=weight.device)
    if out.numel():
        _EXT.embedding_gather_vec_launch(flat, weight, out, threads, blocks_per_sm)
    return out.reshape(*ids.shape, weight.shape[1])


def reference(ids: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """Return torch.nn.functional.embedding(ids, weight)."""
    return torch.nn.functional.embedding(ids.long(), weight)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return ``{"ids", "weight"}`` for ``shape = {"tokens", "vocab", "hidden"[, "id_dtype"]}``:
    a N(0, 1) table and uniform ids (int32 unless ``id_dtype`` says "int64")."""
    id_dtype = torch.int64 if shape.get("id_dtype") == "int64" else torch.int32
    ids = torch.randint(0, shape["vocab"], (shape["tokens"],), device=device, dtype=id_dtype)
    weight = torch.randn(shape["vocab"], shape["hidden"], device=device).to(dtype)
    return {"ids": ids, "weight": weight}
