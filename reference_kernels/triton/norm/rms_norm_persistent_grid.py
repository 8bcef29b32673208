"""
---
id: rms_norm_persistent_grid
title: RMSNorm on a persistent grid striding over rows, the weight loaded once per program
op_family: norm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [persistent-grid, grid-stride-rows, weight-reuse, fp32-accumulate]
status: reference
launcher: rms_norm_persistent_grid
tuning:
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [4, 1, 2, 8, 16]
args:
  x: {shape: [..., N], dtypes: [bf16, fp16, fp32], aliases: [hidden_states, input]}
  weight: {shape: [N], dtypes: [float], aliases: [w]}
  eps: {type: float, default: 1.0e-6, aliases: [epsilon, variance_epsilon, norm_eps, rms_norm_eps]}
returns:
  - {name: y, shape: [..., N], dtype: x}
problem:
  shapes: [{rows: 3, hidden: 1000}, {rows: 33, hidden: 64}]
  dtypes: [fp32, bf16]
measured:
  - {device: NVIDIA H200, shape: rms_norm/0, dtype: bf16, latency_us: 8.064, sol_fraction: 0.3492, date: '2026-12-03'}
---
RMSNorm y = x * rsqrt(mean(x^2) + eps) * w (atrex30 rms_norm: fp32 math, one rounding at the end)
on a persistent grid of min(M, programs_per_sm * SMs) programs. Each program loads the weight row
once, upcasts it to fp32 and keeps it in registers, then strides over the rows (pid, pid + grid,
...), loading one whole row, reducing its sum of squares in fp32 and storing the scaled row. Bytes
per element: one read and one write of x (4 bytes in bf16); the weight costs one read per program
instead of one per row, and launch cost is paid by a few hundred programs instead of one per
token, which is what prefill batches of 10^4..10^5 short rows need. Limits: rows wider than 65536
do not fit in registers (the weight and a row are both live, so wide rows need more warps); with
fewer rows than programs it is a plain row-per-program kernel; no software pipelining of the next
row's load beyond what the warp scheduler overlaps.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _rms_norm_persistent_kernel(
    # pointers
    x_ptr,
    w_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements; the last dim is contiguous)
    stride_xm,
    stride_ym,
    # scalars
    eps,
    # meta
    BLOCK_N: tl.constexpr,
):
    # int64 start makes the loop variable int64: row * stride can pass 2^31 elements
    pid = tl.program_id(0).to(tl.int64)
    num_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    # the weight is read once per program and reused for every row it visits
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)

    for row in range(pid, M, num_programs):
        x = tl.load(x_ptr + row * stride_xm + offs, mask=mask, other=0.0).to(tl.float32)
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)  # padded lanes are 0
        y = x * inv_rms * w
        tl.store(y_ptr + row * stride_ym + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _launch_config(n: int) -> dict[str, int]:
    """Return the row block (next power of two), programs per SM and warps."""
    block_n = triton.next_power_of_2(n)
    return {"block_n": block_n, "programs_per_sm": 4, "num_warps": min(max(block_n // 512, 1), 16)}


def rms_norm_persistent_grid(
    x: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    *,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return RMSNorm(x) * weight over the last dimension on a persistent grid.

    Args:
        x: (..., N) bf16/fp16/fp32, last dimension contiguous.
        weight: (N,) any float dtype.
        eps: Added to mean(x^2) before the reciprocal square root.
        programs_per_sm: Persistent programs per SM (grid = min(rows, this * SMs)); None = 4.
        num_warps: Warps per program; None picks by row width.

    Returns:
        y: same shape and dtype as ``x``, contiguous; fp32 math rounded once.

    Raises:
        ValueError: The weight's shape does not match, the row is wider than 65536, or
            programs_per_sm is below 1.
    """
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"weight must be ({n},) for x {tuple(x.shape)}; got {tuple(weight.shape)}")
    if n > 65536:
        raise ValueError(f"row width {n} > 65536 does not fit in registers; use rms_norm_looped")
    if programs_per_sm is not None and programs_per_sm < 1:
        raise ValueError(f"programs_per_sm must be >= 1; got {programs_per_sm}")
    x2 = x.reshape(-1, n)
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    m = x2.shape[0]
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if y.numel() == 0:
        return y.reshape(x.shape)
    cfg = _launch_config(n)
    given = {"programs_per_sm": programs_per_sm, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (min(m, cfg["programs_per_sm"] * _num_sms(x.device)),)
    _rms_norm_persistent_kernel[grid](
        x2, weight.contiguous(), y,
        m, n,
        x2.stride(0), y.stride(0),
        eps,
        BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y.reshape(x.shape)


def reference(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Return RMSNorm(x) * weight computed in fp32 and cast to x's dtype (atrex30 rms_norm)."""
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps) * weight.float()
    return y.to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x", "weight"}`` for ``shape = {"rows", "hidden"}``: x ~ 0.02 N, w ~ 1 + 0.02 N."""
    rows, hidden = shape["rows"], shape["hidden"]
    x = (torch.randn(rows, hidden, device=device) * 0.02).to(dtype)
    weight = (1.0 + 0.02 * torch.randn(hidden, device=device)).to(dtype)
    return {"x": x, "weight": weight}
