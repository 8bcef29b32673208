"""
---
id: reshape_and_cache_cuda
title: Paged KV-cache write in CUDA C++, one block per token, widest aligned vector copy over H*D
op_family: cache
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-token, scatter, slot-mapping, in-place, vectorized-load, dtype-agnostic-copy,
   strided-access, load-inline]
status: reference
launcher: reshape_and_cache_cuda
tuning:
  threads: [128, 64, 256, 512]
args:
  key: {shape: [T, H, D], dtypes: [bf16, fp16, fp32], flattened: true, aliases: [k]}
  value: {shape: [T, H, D], like: key, flattened: true, aliases: [v]}
  key_cache: {shape: [NB, BS, H, D], like: key, aliases: [k_cache]}
  value_cache: {shape: [NB, BS, H, D], like: key, aliases: [v_cache]}
  slot_mapping: {shape: [T], dtypes: [int32, int64], aliases: [slots, slot_ids]}
returns:
  - {name: key_cache, alias: key_cache}
  - {name: value_cache, alias: value_cache}
problem:
  shapes: [{tokens: 17, heads: 2, head_dim: 3, block_size: 8}, {tokens: 33, heads: 3, head_dim: 40}]
  dtypes: [fp32, bf16]
  in_place: [key_cache, value_cache]
measured: []
---
The KV-cache write of paged attention in CUDA C++ (built with load_inline): token t's key and value
(H, D) go to slot s = slot_mapping[t] of caches laid out (num_blocks, block_size, H, D), i.e. block
s // block_size, offset s % block_size; tokens with a negative slot (padding) are skipped. The
caches are updated IN PLACE (the operator's definition); the launcher returns the same two
tensors. One block per token copies the token's H * D elements of key and of value as raw bytes in
the widest unit that every base pointer, every stride and the head size allow (16-byte uint4 in
the usual case: 8 bf16 values per load and store), so the kernel is dtype-agnostic and each warp
access is 512 contiguous bytes; strides are honoured on both sides, so key/value may be slices of
a fused qkv output and the cache may be a strided view with a contiguous head dimension. Bytes:
read and write 2 * H * D elements per token, nothing else; no FLOPs. It wins whenever H * D * 2
bytes is a multiple of 16, i.e. almost always. Limits: one block per token, so decode (T = 1..8)
runs on a handful of SMs; duplicate slots race (last writer wins, unspecified); no fp8 cache
conversion (key and cache share a dtype); an odd head size in bytes falls back to narrow copies.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <stdint.h>

// U: the copy unit (uint4, uint2, uint32_t, uint16_t or uint8_t); P: slot index type
template <typename U, typename P>
__global__ void reshape_and_cache_kernel(
    const char* __restrict__ key, const char* __restrict__ value,    // sources (bytes)
    char* __restrict__ key_cache, char* __restrict__ value_cache,    // destinations (bytes)
    const P* __restrict__ slot_mapping,
    int heads, int64_t head_bytes, int64_t block_size,               // sizes
    int64_t sk_t, int64_t sk_h, int64_t sv_t, int64_t sv_h,          // source strides (bytes)
    int64_t kc_b, int64_t kc_s, int64_t kc_h,                        // key cache strides (bytes)
    int64_t vc_b, int64_t vc_s, int64_t vc_h) {                      // value cache strides
    const int64_t t = blockIdx.x;
    const int64_t slot = (int64_t)slot_mapping[t];
    if (slot < 0) return;  // padding token: nothing to write
    const int64_t blk = slot / block_size, off = slot - blk * block_size;
    const int64_t units_per_head = head_bytes / (int64_t)sizeof(U);
    const int64_t units = heads * units_per_head;
    const char* k_src = key + t * sk_t;
    const char* v_src = value + t * sv_t;
    char* k_dst = key_cache + blk * kc_b + off * kc_s;
    char* v_dst = value_cache + blk * vc_b + off * vc_s;
    // consecutive threads copy consecutive units: one coalesced run per head per warp
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
        const int64_t h = u / units_per_head;
        const int64_t b = (u - h * units_per_head) * (int64_t)sizeof(U);
        *reinterpret_cast<U*>(k_dst + h * kc_h + b) =
            *reinterpret_cast<const U*>(k_src + h * sk_h + b);
        *reinterpret_cast<U*>(v_dst + h * vc_h + b) =
            *reinterpret_cast<const U*>(v_src + h * sv_h + b);
    }
}
"""

_CUDA_HOST = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

template <typename U, typename P>
static void launch_typed(torch::Tensor key, torch::Tensor value, torch::Tensor kc,
                         torch::Tensor vc, torch::Tensor slots, int64_t threads) {
    const int64_t es = key.element_size();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    reshape_and_cache_kernel<U, P><<<(unsigned)key.size(0), (unsigned)threads, 0, stream>>>(
        static_cast<const char*>(key.data_ptr()), static_cast<const char*>(value.data_ptr()),
        static_cast<char*>(kc.data_ptr()), static_cast<char*>(vc.data_ptr()),
        static_cast<const P*>(slots.data_ptr()), (int)key.size(1), key.size(2) * es, kc.size(1),
        key.stride(0) * es, key.stride(1) * es, value.stride(0) * es, value.stride(1) * es,
        kc.stride(0) * es, kc.stride(1) * es, kc.stride(2) * es,
        vc.stride(0) * es, vc.stride(1) * es, vc.stride(2) * es);
}

template <typename U>
static void launch_unit(torch::Tensor key, torch::Tensor value, torch::Tensor kc,
                        torch::Tensor vc, torch::Tensor slots, int64_t threads) {
    if (slots.scalar_type() == at::ScalarType::Long)
        launch_typed<U, int64_t>(key, value, kc, vc, slots, threads);
    else
        launch_typed<U, int32_t>(key, value, kc, vc, slots, threads);
}

void reshape_and_cache_launch(torch::Tensor key, torch::Tensor value, torch::Tensor kc,
                              torch::Tensor vc, torch::Tensor slots, int64_t threads) {
    const c10::cuda::CUDAGuard guard(key.device());
    const int64_t es = key.element_size();
    // the widest unit that divides every base address, byte stride and the head size
    uint64_t g = (uint64_t)(key.size(2) * es);
    for (const torch::Tensor* t : {&key, &value, &kc, &vc}) {
        g |= reinterpret_cast<uintptr_t>(t->data_ptr());
        for (int64_t d = 0; d + 1 < t->dim(); ++d) g |= (uint64_t)(t->stride(d) * es);
    }
    const int64_t unit = (int64_t)(g & (~g + 1));  // lowest set bit = largest power-of-2 divisor
    if (unit % 16 == 0) launch_unit<uint4>(key, value, kc, vc, slots, threads);
    else if (unit % 8 == 0) launch_unit<uint2>(key, value, kc, vc, slots, threads);
    else if (unit % 4 == 0) launch_unit<uint32_t>(key, value, kc, vc, slots, threads);
    else if (unit % 2 == 0) launch_unit<uint16_t>(key, value, kc, vc, slots, threads);
    else launch_unit<uint8_t>(key, value, kc, vc, slots, threads);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void reshape_and_cache_launch(torch::Tensor key, torch::Tensor value, torch::Tensor kc, "
    "torch::Tensor vc, torch::Tensor slots, int64_t threads);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension.

    The first call in a process runs nvcc (about a minute) unless load_inline's on-disk cache,
    keyed by the name and a hash of the sources, already holds the build; later calls load it.
    """
    return load_inline(
        name="aka_reshape_and_cache_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["reshape_and_cache_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import (nvcc about a minute the first time, then load_inline's on-disk
# cache): a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _check(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> None:
    """Raise ValueError naming the first argument that breaks the launcher's contract."""
    if not key.is_cuda or key.dtype not in _DTYPES or key.dim() != 3:
        raise ValueError(
            f"key must be a (T, H, D) CUDA fp32/fp16/bf16 tensor; got {key.dtype} "
            f"{tuple(key.shape)} on {key.device}"
        )
    if value.shape != key.shape or value.dtype != key.dtype or value.device != key.device:
        raise ValueError(
            f"value must match key {tuple(key.shape)} {key.dtype}; got {tuple(value.shape)} "
            f"{value.dtype} on {value.device}"
        )
    for name, cache in (("key_cache", key_cache), ("value_cache", value_cache)):
        if (
            cache.dim() != 4
            or cache.shape[2:] != key.shape[1:]
            or cache.dtype != key.dtype
            or cache.device != key.device
            or cache.stride(-1) != 1
        ):
            raise ValueError(
                f"{name} must be (num_blocks, block_size, {key.shape[1]}, {key.shape[2]}) "
                f"{key.dtype} on {key.device} with a contiguous last dimension (it is written "
                f"in place); got {cache.dtype} {tuple(cache.shape)} strides {cache.stride()}"
            )
    if value_cache.shape != key_cache.shape:
        raise ValueError(
            f"value_cache {tuple(value_cache.shape)} must match key_cache {tuple(key_cache.shape)}"
        )
    if (
        slot_mapping.shape != (key.shape[0],)
        or slot_mapping.dtype not in (torch.int32, torch.int64)
        or slot_mapping.device != key.device
    ):
        raise ValueError(
            f"slot_mapping must be ({key.shape[0]},) int32/int64 on {key.device}; got "
            f"{slot_mapping.dtype} {tuple(slot_mapping.shape)} on {slot_mapping.device}"
        )


def reshape_and_cache_cuda(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
    *,
    threads: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write each token's key and value into its cache slot, in place.

    Args:
        key: (T, H, D) bf16/fp16/fp32 on a CUDA device, any strides (a non-contiguous last
            dimension is copied first).
        value: (T, H, D) like ``key``.
        key_cache: (num_blocks, block_size, H, D) key's dtype, head dimension contiguous;
            updated in place.
        value_cache: same shape as ``key_cache``; updated in place.
        slot_mapping: (T,) int32/int64 flat slot per token, < num_blocks * block_size (not
            checked on the device); negative = skip.
        threads: Threads per token block, a multiple of 32 in 32..1024; None = 128.

    Returns:
        key_cache and value_cache, the same tensors, updated.

    Raises:
        ValueError: An argument has the wrong shape, dtype, device or layout, or threads is out
            of range.
    """
    _check(key, value, key_cache, value_cache, slot_mapping)
    block = threads or 128
    if block % 32 or not 32 <= block <= 1024:
        raise ValueError(f"threads must be a multiple of 32 in 32..1024; got {block}")
    if key.shape[0] and key.numel():
        key = key if key.stride(-1) == 1 else key.contiguous()
        value = value if value.stride(-1) == 1 else value.contiguous()
        _EXT.reshape_and_cache_launch(
            key, value, key_cache, value_cache, slot_mapping.contiguous(), block
        )
    return key_cache, value_cache


def reference(
    key: torch.Tensor,
    value: torch.Tensor,
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    slot_mapping: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Write each kept token into its cache slot in place, as the launcher does; return both."""
    keep = slot_mapping >= 0
    slots = slot_mapping[keep].long()
    key_cache.view(-1, *key_cache.shape[2:])[slots] = key[keep]
    value_cache.view(-1, *value_cache.shape[2:])[slots] = value[keep]
    return key_cache, value_cache


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return the five tensors for ``shape = {"tokens", "heads", "head_dim"}``.

    Slots are distinct random slots in caches one block larger than needed, with every fifth token
    marked as padding (-1); the caches start as random values so skipped slots show.
    """
    t, h, d, bs = shape["tokens"], shape["heads"], shape["head_dim"], shape.get("block_size", 16)
    num_blocks = (t + bs - 1) // bs + 1
    slot_mapping = torch.randperm(num_blocks * bs, device=device)[:t]
    slot_mapping[::5] = -1
    return {
        "key": torch.randn(t, h, d, device=device).to(dtype),
        "value": torch.randn(t, h, d, device=device).to(dtype),
        "key_cache": torch.randn(num_blocks, bs, h, d, device=device).to(dtype),
        "value_cache": torch.randn(num_blocks, bs, h, d, device=device).to(dtype),
        "slot_mapping": slot_mapping,
    }
