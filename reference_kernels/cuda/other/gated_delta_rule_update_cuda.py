"""
---
id: gated_delta_rule_update_cuda
title: Gated delta rule in CUDA C++, block per (sequence, value head), state columns in registers
op_family: other
dsl: cuda
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques:
  [block-per-head, register-resident-state, thread-per-value-column, smem-broadcast-qk,
   fused-l2norm, fused-gates, state-pool-indices, fp32-accumulate, load-inline]
status: reference
launcher: gated_delta_rule_update_cuda
tuning:
  k_max: [128, 64]
args:
  A_log: {shape: [HV], dtypes: [fp32]}
  a: {shape: [B, T, HV], dtypes: [bf16, fp16, fp32]}
  dt_bias: {shape: [HV], like: a}
  q: {shape: [B, T, HQ, K], like: a, aliases: [query]}
  k: {shape: [B, T, HQ, K], like: a, aliases: [key]}
  v: {shape: [B, T, HV, V], like: a, aliases: [value]}
  b: {shape: [B, T, HV], like: a, aliases: [beta_logits]}
  initial_state: {shape: [S, HV, K, V], dtypes: [fp32], aliases: [ssm_state, state_pool]}
  initial_state_indices: {shape: [B], dtypes: [int32], aliases: [state_indices, cache_indices]}
  softplus_beta: {type: float, default: 1.0}
  softplus_threshold: {type: float, default: 20.0}
  use_qk_l2norm: {type: bool, default: true}
returns:
  - {name: out, shape: [B, T, HV, V], dtype: v}
  - {name: final_state, shape: [S, HV, K, V], dtype: fp32}
problem:
  shapes: [{batch: 2, tokens: 5, q_heads: 2, v_heads: 4, key_dim: 64, value_dim: 48, slots: 3}, {batch: 3, tokens: 8, q_heads: 1, v_heads: 2, key_dim: 100, value_dim: 40, slots: 3}]
  dtypes: [fp32, bf16]
measured: []
---
atrex30 gated_delta_rule_update in CUDA C++ (built with load_inline): per sequence and value head,
for each token in order, state *= exp(-exp(A_log) * softplus(a + dt_bias)); v_new = (v - state^T k)
* sigmoid(b); state += k v_new^T; out = state^T q / sqrt(K), with q and k L2-normalised and value
head h reading query/key head h // (HV / HQ). One block per (value head, sequence, 128 value
columns) with one thread per value column j: the thread keeps state[:, j] (K <= 128 fp32 values)
in registers for the whole sequence, so the state is read from and written to DRAM once per call,
not once per token. The returned pool is a new tensor: a first small kernel copies the slots no
sequence of the batch owns (a block per slot checks the index list), the step kernel writes the
owned ones, so no slot is written twice and the input pool is never modified. Per token the block
stages k and q in shared memory (every thread then reads them as broadcasts and
computes the norms and gates redundantly, which costs no synchronisation), and each thread does
4K FMAs: decay, k-projection, rank-1 update and q-projection, with two __syncthreads per token.
DRAM traffic: 2 * 4KV bytes of state per (sequence, head) plus the token inputs; it wins at decode
and short chunks, where the state dominates and a chunked (matmul) form has nothing to amortise.
Limits: K <= 128 (register arrays; K = 256 would spill); long prefills are serial in T
(a chunked WY kernel is far faster there); sequences sharing a state slot race on the write-back;
outputs and gates follow the inputs' dtype, the state stays fp32.
"""

import torch
from torch.utils.cpp_extension import load_inline

_CUDA_KERNELS = r"""
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
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

// grid (HV, B, value-column chunks); thread j of chunk z owns value column z * blockDim.x + j.
// At most 128 threads per block, so the KMAX-float state column may use up to 255 registers.
template <typename T, int KMAX>
__global__ void __launch_bounds__(128) gated_delta_rule_update_kernel(
    const float* __restrict__ a_log, const T* __restrict__ a, const T* __restrict__ dt_bias,
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ b, const float* __restrict__ state0, const int* __restrict__ slots,
    T* __restrict__ out, float* __restrict__ state1, int tokens, int hq, int hv, int kd, int vd,
    float sp_beta, float sp_threshold, bool l2norm) {
    __shared__ float sk[KMAX], sq[KMAX];
    const int h = blockIdx.x, seq = blockIdx.y, j = blockIdx.z * blockDim.x + threadIdx.x;
    const int qh = h / (hv / hq);
    const bool active = j < vd;
    const int64_t base = ((int64_t)slots[seq] * hv + h) * kd * (int64_t)vd;
    float st[KMAX];
#pragma unroll
    for (int i = 0; i < KMAX; ++i) {
        st[i] = (active && i < kd) ? state0[base + (int64_t)i * vd + j] : 0.f;
    }
    const float neg_a = -expf(a_log[h]);
    const float out_scale = rsqrtf((float)kd);
    for (int t = 0; t < tokens; ++t) {
        const int64_t bt = (int64_t)seq * tokens + t;
        const int64_t qk_off = (bt * hq + qh) * kd;
        for (int i = threadIdx.x; i < kd; i += blockDim.x) {
            sk[i] = to_f32(k[qk_off + i]);
            sq[i] = to_f32(q[qk_off + i]);
        }
        __syncthreads();
        float k_inv = 1.f, q_inv = 1.f;
        if (l2norm) {  // every thread reduces the staged vectors itself: smem broadcasts
            float kk = 0.f, qq = 0.f;
            for (int i = 0; i < kd; ++i) { kk += sk[i] * sk[i]; qq += sq[i] * sq[i]; }
            k_inv = rsqrtf(kk + 1e-6f);
            q_inv = rsqrtf(qq + 1e-6f);
        }
        const int64_t g_off = bt * hv + h;
        const float x = to_f32(a[g_off]) + to_f32(dt_bias[h]);
        const float sp = sp_beta * x > sp_threshold ? x : log1pf(expf(sp_beta * x)) / sp_beta;
        const float decay = expf(neg_a * sp);
        const float beta = 1.f / (1.f + expf(-to_f32(b[g_off])));
        if (active) {
            float pred = 0.f;
#pragma unroll
            for (int i = 0; i < KMAX; ++i) {
                if (i < kd) { st[i] *= decay; pred += st[i] * (sk[i] * k_inv); }
            }
            const int64_t v_off = (bt * hv + h) * vd + j;
            const float v_new = (to_f32(v[v_off]) - pred) * beta;
            float o = 0.f;
#pragma unroll
            for (int i = 0; i < KMAX; ++i) {
                if (i < kd) { st[i] += (sk[i] * k_inv) * v_new; o += st[i] * (sq[i] * q_inv); }
            }
            out[v_off] = from_f32<T>(o * out_scale);
        }
        __syncthreads();  // sk / sq are rewritten by the next token
    }
    if (active) {
#pragma unroll
        for (int i = 0; i < KMAX; ++i) {
            if (i < kd) state1[base + (int64_t)i * vd + j] = st[i];
        }
    }
}

// grid (S, chunks): block (s, c) copies part of slot s of the pool unless a sequence of the batch
// owns slot s (the step kernel writes those), so every slot of state1 is written exactly once.
__global__ void copy_idle_slots_kernel(const float* __restrict__ state0,
                                       const int* __restrict__ slots, float* __restrict__ state1,
                                       int batch, int64_t slot_elems) {
    __shared__ int used;
    const int s = blockIdx.x;
    if (threadIdx.x == 0) used = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < batch; i += blockDim.x) {
        if (slots[i] == s) used = 1;  // benign race: every writer stores 1
    }
    __syncthreads();
    if (used) return;
    const int64_t base = (int64_t)s * slot_elems;
    const int64_t step = (int64_t)gridDim.y * blockDim.x;
    for (int64_t e = (int64_t)blockIdx.y * blockDim.x + threadIdx.x; e < slot_elems; e += step) {
        state1[base + e] = state0[base + e];
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

// P(t): tensor t as const T*, T being the dispatched element type at the expansion site
#define P(t) static_cast<const T*>(t.data_ptr())
#define AKA_GDR_LAUNCH(KM)                                                                 \
    gated_delta_rule_update_kernel<T, KM><<<grid, threads, 0, stream>>>(                   \
        a_log.data_ptr<float>(), P(a), P(dt_bias), P(q), P(k), P(v), P(b),                 \
        state0.data_ptr<float>(), slots.data_ptr<int>(), static_cast<T*>(out.data_ptr()),  \
        state1.data_ptr<float>(), tokens, hq, hv, kd, vd, (float)sp_beta,                  \
        (float)sp_threshold, l2norm)

void gated_delta_rule_update_launch(torch::Tensor a_log, torch::Tensor a, torch::Tensor dt_bias,
                                    torch::Tensor q, torch::Tensor k, torch::Tensor v,
                                    torch::Tensor b, torch::Tensor state0, torch::Tensor slots,
                                    torch::Tensor out, torch::Tensor state1, double sp_beta,
                                    double sp_threshold, bool l2norm, int64_t k_max) {
    const c10::cuda::CUDAGuard guard(q.device());
    const int bsz = (int)q.size(0), tokens = (int)q.size(1), hq = (int)q.size(2);
    const int kd = (int)q.size(3), hv = (int)v.size(2), vd = (int)v.size(3);
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    const int64_t slots_n = state0.size(0), slot_elems = state0.numel() / std::max<int64_t>(1, slots_n);
    if (slots_n > 0 && slot_elems > 0) {  // the pool's idle slots, copied unchanged
        const unsigned chunks = (unsigned)std::min<int64_t>(64, (slot_elems + 255) / 256);
        copy_idle_slots_kernel<<<dim3((unsigned)slots_n, chunks), 256, 0, stream>>>(
            state0.data_ptr<float>(), slots.data_ptr<int>(), state1.data_ptr<float>(), bsz,
            slot_elems);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    if (bsz == 0 || hv == 0 || vd == 0) return;
    const unsigned threads = (unsigned)std::min(128, (vd + 31) / 32 * 32);
    const dim3 grid((unsigned)hv, (unsigned)bsz, (unsigned)((vd + threads - 1) / threads));
    AKA_DISPATCH_FLOAT(q.scalar_type(), T, {
        if (k_max == 64) { AKA_GDR_LAUNCH(64); } else { AKA_GDR_LAUNCH(128); }
    });
    C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""

_CPP_DECL = (
    "void gated_delta_rule_update_launch(torch::Tensor a_log, torch::Tensor a, "
    "torch::Tensor dt_bias, torch::Tensor q, torch::Tensor k, torch::Tensor v, torch::Tensor b, "
    "torch::Tensor state0, torch::Tensor slots, torch::Tensor out, torch::Tensor state1, "
    "double sp_beta, double sp_threshold, bool l2norm, int64_t k_max);"
)
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _extension():
    """Return the compiled extension (nvcc on the first call, load_inline's disk cache after)."""
    return load_inline(
        name="aka_gated_delta_rule_update_cuda",
        cpp_sources=_CPP_DECL,
        cuda_sources=_CUDA_KERNELS + _CUDA_HOST,
        functions=["gated_delta_rule_update_launch"],
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )


# Built once, at import: a load_inline per call costs ~150 us of host time on every launch.
_EXT = _extension()


def _check(name: str, t: torch.Tensor, shape: tuple, dtypes: tuple, device: torch.device) -> None:
    """Raise ValueError unless ``t`` has ``shape``, one of ``dtypes`` and ``device``."""
    if tuple(t.shape) != shape or t.dtype not in dtypes or t.device != device:
        raise ValueError(
            f"{name} must be {shape} {'/'.join(str(d) for d in dtypes)} on {device}; got "
            f"{tuple(t.shape)} {t.dtype} on {t.device}"
        )


def gated_delta_rule_update_cuda(
    A_log: torch.Tensor,  # noqa: N803
    a: torch.Tensor,
    dt_bias: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor,
    initial_state_indices: torch.Tensor,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    use_qk_l2norm: bool = True,
    *,
    k_max: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the gated delta rule over every sequence; the inputs are not modified.

    Args:
        A_log: (HV,) fp32 log decay rates.
        a: (B, T, HV) gate inputs, bf16/fp16/fp32 on a CUDA device (q's dtype).
        dt_bias: (HV,) like ``a``.
        q: (B, T, HQ, K) queries, K <= 128.
        k: (B, T, HQ, K) keys.
        v: (B, T, HV, V) values, HV a multiple of HQ.
        b: (B, T, HV) beta logits.
        initial_state: (S, HV, K, V) fp32 state pool.
        initial_state_indices: (B,) int32 slot per sequence, in 0..S-1.
        softplus_beta: Softplus beta.
        softplus_threshold: Softplus linear threshold (on beta * x).
        use_qk_l2norm: L2-normalise q and k over K first.
        k_max: Register array length per thread, 64 or 128 (>= K); None picks the smallest.

    Returns:
        (out, final_state): out (B, T, HV, V) in q's dtype; final_state (S, HV, K, V) fp32, a new
        pool with the active slots holding their sequence's last state (as the Triton designs).

    Raises:
        ValueError: a tensor has the wrong shape, dtype or device.
    """
    if not q.is_cuda or q.dtype not in _DTYPES or q.dim() != 4:
        raise ValueError(f"q must be a (B, T, HQ, K) CUDA float tensor; got {q.dtype} {q.shape}")
    bsz, t, hq, kd = q.shape
    if v.dim() != 4 or v.shape[:2] != (bsz, t) or v.shape[2] % hq or v.shape[3] < 1:
        raise ValueError(f"v must be ({bsz}, {t}, HV = m * {hq}, V >= 1); got {tuple(v.shape)}")
    if not 1 <= kd <= 128:
        raise ValueError(f"key dim K must be in 1..128 (register-resident state); got {kd}")
    hv, vd, dev, same = v.shape[2], v.shape[3], q.device, (q.dtype,)
    slots_n = initial_state.shape[0] if initial_state.dim() == 4 else -1
    _check("k", k, (bsz, t, hq, kd), same, dev)
    _check("v", v, (bsz, t, hv, vd), same, dev)
    _check("a", a, (bsz, t, hv), same, dev)
    _check("b", b, (bsz, t, hv), same, dev)
    _check("dt_bias", dt_bias, (hv,), same, dev)
    _check("A_log", A_log, (hv,), (torch.float32,), dev)
    _check("initial_state", initial_state, (slots_n, hv, kd, vd), (torch.float32,), dev)
    _check("initial_state_indices", initial_state_indices, (bsz,), (torch.int32,), dev)
    k_max = k_max or (64 if kd <= 64 else 128)
    if k_max not in (64, 128) or k_max < kd:
        raise ValueError(f"k_max must be 64 or 128 and at least K = {kd}; got {k_max}")
    out = torch.empty_like(v, memory_format=torch.contiguous_format)
    # written whole by the kernels: the sequences' slots by the step kernel, the rest copied
    final_state = torch.empty_like(initial_state, memory_format=torch.contiguous_format)
    if out.numel() > 0 or final_state.numel() > 0:
        _EXT.gated_delta_rule_update_launch(
            *(x.contiguous() for x in (A_log, a, dt_bias, q, k, v, b, initial_state)),
            initial_state_indices.contiguous(),
            out,
            final_state,
            float(softplus_beta),
            float(softplus_threshold),
            bool(use_qk_l2norm),
            k_max,
        )
    return out, final_state


def reference(
    A_log,
    a,
    dt_bias,
    q,
    k,
    v,
    b,
    initial_state,
    initial_state_indices,  # noqa: N803
    softplus_beta=1.0,
    softplus_threshold=20.0,
    use_qk_l2norm=True,
):
    """Return the atrex30 gated_delta_rule_update result token by token in fp32 PyTorch."""
    tokens, hq, kd = q.shape[1], q.shape[2], q.shape[3]
    hv = v.shape[2]
    qf, kf = q.float(), k.float()
    if use_qk_l2norm:
        qf = qf * torch.rsqrt(qf.pow(2).sum(-1, keepdim=True) + 1e-6)
        kf = kf * torch.rsqrt(kf.pow(2).sum(-1, keepdim=True) + 1e-6)
    qf, kf = qf.repeat_interleave(hv // hq, dim=2), kf.repeat_interleave(hv // hq, dim=2)
    sp = torch.nn.functional.softplus(
        a.float() + dt_bias.float(), beta=softplus_beta, threshold=softplus_threshold
    )
    decay, beta = torch.exp(-torch.exp(A_log.float()) * sp), torch.sigmoid(b.float())
    slots = initial_state_indices.long()
    state = initial_state[slots].clone()
    out = torch.empty(v.shape, dtype=torch.float32, device=v.device)
    for i in range(tokens):
        state = state * decay[:, i, :, None, None]
        v_new = (v[:, i].float() - torch.einsum("bhkv,bhk->bhv", state, kf[:, i])) * beta[
            :, i, :, None
        ]
        state = state + kf[:, i, ..., None] * v_new[..., None, :]
        out[:, i] = torch.einsum("bhkv,bhk->bhv", state, qf[:, i]) * kd**-0.5
    final_state = initial_state.clone()
    for i in range(slots.shape[0]):
        final_state.index_copy_(0, slots[i : i + 1], state[i : i + 1])
    return out.to(v.dtype), final_state


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cuda") -> dict:
    """Return the atrex30 draws (N(0, 1) * 0.02; v * 2^10, state * 2^6) in ``dtype``.

    ``shape``: ``batch``, ``tokens``, ``q_heads``, ``v_heads``, ``key_dim``, ``value_dim`` and
    ``slots`` (state pool size; sequence i uses slot i % slots).
    """
    bsz, t, hq, hv = shape["batch"], shape["tokens"], shape["q_heads"], shape["v_heads"]
    kd, vd, slots = shape["key_dim"], shape["value_dim"], shape["slots"]

    def small(*dims: int, dt: torch.dtype = dtype) -> torch.Tensor:
        return (torch.randn(*dims, device=device) * 0.02).to(dt)

    return {
        "A_log": small(hv, dt=torch.float32),
        "a": small(bsz, t, hv),
        "dt_bias": small(hv),
        "q": small(bsz, t, hq, kd),
        "k": small(bsz, t, hq, kd),
        "v": small(bsz, t, hv, vd) * 2.0**10,
        "b": small(bsz, t, hv),
        "initial_state": small(slots, hv, kd, vd, dt=torch.float32) * 2.0**6,
        "initial_state_indices": (torch.arange(bsz, device=device) % slots).to(torch.int32),
    }
