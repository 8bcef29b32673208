"""
---
id: gated_rms_norm_warp_cuda
title: Gated RMSNorm (SiLU or sigmoid gate, either order) in CUDA C++ with one warp per row
op_family: norm
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [warp-per-row, warp-shuffle-reduction, fused-gate, fp32-accumulate, load-inline]
status: reference
launcher: gated_rms_norm_warp_cuda
tuning:
  warps_per_block: [4, 1, 2, 8]
args:
  x: {shape: [R, N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], like: x, aliases: [w]}
  z: {shape: [R, N], like: x, aliases: [gate]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps]}
  norm_before_gate: {type: bool, default: true}
  activation: {type: str, default: silu, aliases: [act]}
returns:
  - {name: out, shape: [R, N], dtype: x}
problem:
  shapes: [{rows: 9, hidden: 33, norm_before_gate: false, activation: silu}, {rows: 5, hidden: 96, norm_before_gate: false, activation: sigmoid}, {rows: 37, hidden: 128}]
  dtypes: [fp32, bf16]
measured: []
---
The gated RMSNorm of gated-delta-net layers (atrex30 gated_rms_norm) in CUDA C++ (built with
load_inline), one warp per row. With norm_before_gate, out = rmsnorm(x) * w * act(z); without it,
out = rmsnorm(x * act(z)) * w; act is SiLU (silu/swish) or the sigmoid, all in fp32 and rounded
once. Both orders and both gates are template parameters, so each variant is a branch-free
kernel. Pass 1 sums the squares of x (or of x * act(z), reading z too) lane-strided and reduces
with five __shfl_xor_sync steps; pass 2 re-reads x and z (L1/L2 hits for rows of 128 values) and
writes the output. DRAM traffic per bf16 element: 2 bytes of x, 2 of z, 2 written (6 bytes), plus
the weight from L2; about 10 FLOPs and one exponential per element (two in gate-first order,
which recomputes the gate in pass 2 instead of keeping it). It wins for the real shape, many
short rows (one 128-wide value head each), where a warp per row keeps every lane busy with no
barrier. Limits: scalar loads; gate-first order evaluates the exponential twice; wide rows
(N >= 16384) leave few loads in flight per warp; weight and z must have x's dtype.
"""

import torch
from torch.utils.cpp_extension import load_inline

ACTIVATIONS = {"silu": 0, "swish": 0, "sigmoid": 1}

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

// ACT 0: SiLU z * sigmoid(z); ACT 1: sigmoid(z)
template <int ACT> __device__ __forceinline__ float gate_of(float z) {
    const float s = 1.f / (1.f + expf(-z));
    return ACT == 0 ? z * s : s;
}

template <typename T, bool NORM_BEFORE_GATE, int ACT>
__global__ void gated_rms_norm_warp_kernel(
    const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ z,
    T* __restrict__ out, int64_t rows, int n, int64_t stride_x, int64_t stride_z,
    int64_t stride_o, float eps) {
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= rows) return;  // whole warps leave together: shuffles keep the full mask
    const T* xr = x + row * stride_x;
    const T* zr = z + row * stride_z;
    T* orow = out + row * stride_o;

    float ss = 0.f;
    for (int i = lane; i < n; i += 32) {
        float v = to_f32(xr[i]);
        if constexpr (!NORM_BEFORE_GATE) v *= gate_of<ACT>(to_f32(zr[i]));
        ss += v * v;
    }
    for (int off = 16; off > 0; off >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, off);
    const float inv_rms = rsqrtf(ss / (float)n + eps);

    for (int i = lane; i < n; i += 32) {
        const float g = gate_of<ACT>(to_f32(zr[i]));
        float v = to_f32(xr[i]);
        if constexpr (NORM_BEFORE_GATE) {
            v = v * inv_rms * to_f32(w[i]) * g;
        } else {
            v = v * g * inv_rms * to_f32(w[i]);
        }
        orow[i] = from_f32<T>(v);
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

#define AKA_GATED_LAUNCH(NBG, ACT)                                                          \
    gated_rms_norm_warp_kernel<T, NBG, ACT><<<grid, block, 0, stream>>>(                    \
        xp, wp, zp, op, rows, n, x.stride(0), z.stride(0), out.stride(0), (float)eps)

void gated_rms_norm_warp_launch(torch::Tensor x, torch::Tensor w, torch::Tensor z,
                                torch::Tensor out, double eps, bool norm_before_gate,
                                int64_t act, int64_t warps_per_block) {
    const c10::cuda::CUDAGuard guard(x.device());
    const int64_t rows = x.size(0);
    const int n = (int)x.size(1);
    const dim3 block((unsigned)(32 * warps_per_block));
    const dim3 grid((unsigned)((rows + warps_per_block - 1) / warps_per_block));
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    AKA_DISPATCH_FLOAT(x.scalar_type(), T, {
        const T* xp = static_cast<const T*>(x.data_ptr());
        const T* wp = static_cast<const T*>(w.data_ptr());
        const T* zp = static_cast<const T*>(z.data_ptr());
        T* op = static_cast<T*>(out.data_ptr());
        if (norm_before_gate) {
            if (act == 0) { AKA_GATED_LAUNCH(true, 0); } else { AKA_GATED_LAUNCH(true, 1); }
        } else {
            if (act == 0) { AKA_GATED_LAUNCH(false, 0); } else { AKA_GATED_LAUNCH(false, 1); }
        }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void gated_rms_norm_warp_launch(torch::Tensor x, torch::Tensor w, torch::Tensor z, "
    "torch::Tensor out, double eps, bool norm_before_gate, int64_t act, "
    "int64_t warps_per_block);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_gated_rms_norm_warp_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["gated_rms_norm_warp_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def gated_rms_norm_warp_cuda(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
    *,
    warps_per_block: int | None = None,
) -> torch.Tensor:
    """Return the gated RMSNorm of x with gate z, rounded once to x's dtype.

    Args:
        x: (R, N) bf16/fp16/fp32 on a CUDA device; rows are made contiguous if needed.
        weight: (N,) same dtype and device as ``x``.
        z: (R, N) the gate, same dtype and device as ``x``.
        eps: Added to mean(y^2) before the reciprocal square root.
        norm_before_gate: True: rmsnorm(x) * w * act(z); False: rmsnorm(x * act(z)) * w.
        activation: "silu" or "swish" (the same) or "sigmoid".
        warps_per_block: Rows per block (one warp each), 1 to 32; None picks 4.

    Returns:
        out: (R, N), x's dtype.

    Raises:
        ValueError: a tensor has the wrong device, dtype or shape, the activation is unknown,
            or warps_per_block is out of range.
    """
    if not x.is_cuda or x.dtype not in _DTYPES or x.dim() != 2 or x.shape[1] < 1:
        raise ValueError(
            f"x must be a 2-D CUDA fp32/fp16/bf16 tensor with rows of >= 1 value; got "
            f"{x.dtype} {tuple(x.shape)} on {x.device}"
        )
    n = x.shape[1]
    if weight.shape != (n,) or weight.dtype != x.dtype or weight.device != x.device:
        raise ValueError(
            f"weight must be ({n},) {x.dtype} on {x.device}; got {tuple(weight.shape)} "
            f"{weight.dtype} on {weight.device}"
        )
    if z.shape != x.shape or z.dtype != x.dtype or z.device != x.device:
        raise ValueError(
            f"z must be {tuple(x.shape)} {x.dtype} on {x.device}; got {tuple(z.shape)} "
            f"{z.dtype} on {z.device}"
        )
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}; got {activation!r}")
    wpb = warps_per_block or 4
    if not 1 <= wpb <= 32:
        raise ValueError(f"warps_per_block must be in 1..32 (1024 threads); got {wpb}")
    x = x if x.stride(-1) == 1 else x.contiguous()
    z = z if z.stride(-1) == 1 else z.contiguous()
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if out.numel():
        _EXT.gated_rms_norm_warp_launch(
            x,
            weight.contiguous(),
            z,
            out,
            float(eps),
            bool(norm_before_gate),
            1 if activation == "sigmoid" else 0,  # ACTIVATIONS' codes (silu, swish: 0)
            wpb,
        )
    return out


def reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    z: torch.Tensor,
    eps: float = 1e-6,
    norm_before_gate: bool = True,
    activation: str = "silu",
) -> torch.Tensor:
    """Return the gated RMSNorm computed in fp32 (atrex30's semantics), cast to x's dtype."""
    zf = z.float()
    gate = torch.sigmoid(zf) if activation == "sigmoid" else torch.nn.functional.silu(zf)
    xf = x.float() if norm_before_gate else x.float() * gate
    out = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    if norm_before_gate:
        out = out * gate
    return out.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return the launcher's kwargs for ``shape = {"rows", "hidden"}`` (+ optional
    ``norm_before_gate``, ``activation``): x ~ 0.02 N(0, 1), weight ~ 1 + 0.02 N(0, 1),
    z ~ N(0, 1), as atrex30 draws them."""
    rows, hidden = shape["rows"], shape["hidden"]
    return {
        "x": (0.02 * torch.randn(rows, hidden, device=device)).to(dtype),
        "weight": (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype),
        "z": torch.randn(rows, hidden, device=device).to(dtype),
        "eps": 1e-6,
        "norm_before_gate": shape.get("norm_before_gate", True),
        "activation": shape.get("activation", "silu"),
    }
