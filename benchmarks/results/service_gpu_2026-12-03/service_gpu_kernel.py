"""
---
id: rms_norm_c1_1
title: rms_norm candidate c1_1 (rms_norm_looped), aka run aa721e4558c740d7
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_90]
dtypes: [fp32]
bound: latency
techniques: [row-per-program, chunked-loop, two-pass, fp32-accumulate, rms-norm-looped]
status: candidate
launcher: ModelNew
measured:
- {device: NVIDIA H200, shape: '0', dtype: fp32, latency_us: 6.816, sol_fraction: 0.4413, date: '2026-12-03'}
- {device: NVIDIA H200, shape: '7', dtype: fp32, latency_us: 5.568, sol_fraction: 0.5402, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_edge_0, dtype: fp32, latency_us: 4.16, sol_fraction: 0.7077, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_scaleup_1, dtype: fp32, latency_us: 8.288, sol_fraction: 0.4148, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_scaledown_2, dtype: fp32, latency_us: 4.448, sol_fraction: 0.6619, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_alignment_3, dtype: fp32, latency_us: 10.592, sol_fraction: 0.2779, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_aspect_4, dtype: fp32, latency_us: 26.368, sol_fraction: 0.1117, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_realistic_5, dtype: fp32, latency_us: 13.184, sol_fraction: 0.6357, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_alignment_6, dtype: fp32, latency_us: 14.304, sol_fraction: 0.2656, date: '2026-12-03'}
- {device: NVIDIA H200, shape: holdout_alignment_7, dtype: fp32, latency_us: 5.984, sol_fraction: 0.492, date: '2026-12-03'}
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w for rows of any width: one program per row walks the row
in BLOCK_N chunks twice. Pass 1 accumulates x^2 element-wise into an fp32 vector (one tree reduction
at the end, which is also more accurate than a running scalar); pass 2 reloads each chunk, scales by
the weight and stores. Registers are bounded by BLOCK_N whatever the width, so 64K..1M-wide rows
work without spilling. Cost: x is read twice (the second read usually hits L2 for rows up to a few
MB), so DRAM traffic is 2 + 2 bytes per bf16 element when the row stays in L2 and 4 + 2 when it does
not. Limits: one program per row, so few wide rows leave SMs idle (a split-row reduction would fix
that); for rows that fit in registers rms_norm_rowwise reads x only once.

Adapted by aka's offline search from the reference kernel rms_norm_looped (tuning {'block_n': 1024, 'num_warps': 4}): ModelNew calls rms_norm_looped(x=x, weight=weight, eps=self.eps, block_n=1024, num_warps=4).

Produced by aka run aa721e4558c740d7 for rms_norm: candidate c1_1 of design rms_norm_looped
(search:rms_norm_looped), round 1, parameters block_n=1024, num_warps=4. On NVIDIA H200 it reaches
48.8 % SOL (geometric mean over 2 tune shapes); the measured entries above are per shape.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_looped_kernel(
    # pointers
    x_ptr,
    w_ptr,
    y_ptr,
    # sizes
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride can pass 2^31 elements
    x_row = x_ptr + row * stride_xm
    y_row = y_ptr + row * stride_ym
    offs = tl.arange(0, BLOCK_N)

    # pass 1: element-wise fp32 partial sums of x^2, reduced once after the loop
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        acc += x * x
    inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)

    # pass 2: reload (mostly from L2), scale, store
    for start in range(0, N, BLOCK_N):
        cols = start + offs
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the chunk width (at most 4096, at least the row) and warps (about 8 per thread)."""
    block_n = min(triton.next_power_of_2(n), 4096)
    num_warps = min(max(block_n // 256, 1), 8)
    return {"block_n": block_n, "num_warps": num_warps}


def rms_norm_looped(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension, looping over the row in chunks.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous; N may be arbitrarily large.
        weight: (N,) any float dtype, contiguous.
        eps: Added to mean(x^2) before the reciprocal square root.
        block_n: Chunk width (power of two); None picks min(next_pow2(N), 4096).
        num_warps: Warps per program; None picks by chunk width.

    Returns:
        y: same shape and dtype as ``x``, contiguous.

    Raises:
        ValueError: The weight does not match the last dimension of x.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    y = torch.empty((x2.shape[0], n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _rms_norm_looped_kernel[(x2.shape[0],)](
        x2, weight.contiguous(), y,
        n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


class ModelNew(torch.nn.Module):
    """rms_norm_looped adapted to the problem (generated; views only in forward)."""

    def __init__(self, eps=1e-06):
        super().__init__()
        self.eps = eps

    def forward(self, x, weight):
        _out = rms_norm_looped(
            x=x,
            weight=weight,
            eps=self.eps,
            block_n=1024,
            num_warps=4,
        )
        return _out
