"""
---
id: cumsum_three_kernel_long_1d
title: Long 1-D inclusive scan in three launches, block sums, a scan of the sums, then add offsets
op_family: scan
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32, int32, int64]
bound: memory
techniques: [reduce-then-scan, three-kernel-scan, block-per-program, carried-prefix-sum,
  fp32-accumulate]
status: reference
launcher: cumsum_three_kernel_long_1d
tuning:
  block: [2048, 16, 64, 256, 1024, 4096]
  block_s: [1024, 16, 64, 256, 4096]
  num_warps: [8, 1, 2, 4, 16]
args:
  x: {shape: [N], dtypes: [bf16, fp16, fp32, int32, int64], aliases: [input, values]}
returns:
  - {name: y, shape: [N], dtype: x}
problem:
  shapes: [{size: 5000}, {size: 7}]
  dtypes: [fp32, bf16]
measured: []
---
y[i] = x[0] + ... + x[i] for one long vector (torch.cumsum(x, 0)), spread over the whole GPU. A
row-per-program scan puts a 100M-element vector on one SM; here the work is split into
B = cdiv(N, BLOCK) blocks and three launches. Kernel 1 (B programs): each block's total (fp32 for
floats, int64 for ints) into a sums buffer. Kernel 2 (one program): an exclusive scan of the B
sums in BLOCK_S chunks (tl.cumsum per chunk plus a carried total), in place, so entry b becomes the
sum of every block before b. Kernel 3 (B programs): each block re-reads its elements, scans them
with tl.cumsum in registers, adds its offset and writes. No inter-block communication inside a
launch (no look-back, no spin-waits), so it is correct under any block scheduling order. Bytes:
two reads and one write per element (x is read by kernels 1 and 3; the second read often hits L2
for N up to tens of MB) plus 16 B per block of sums; a single-pass decoupled look-back scan would
save the second read. Floats are rounded once at the store; int32/int64 accumulate in int64 and
return int64, as torch.cumsum. Limits: the middle kernel is one CTA walking B sums (B = N / 2048,
fine up to ~1e9 elements); float rounding order (block, then offsets) differs from a sequential
sum by a few ulps of the running total.
"""

import torch
import triton
import triton.language as tl

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)
_INTS = (torch.int32, torch.int64)


@triton.jit
def _block_sums_kernel(x_ptr, sums_ptr, N, IS_INT: tl.constexpr, BLOCK: tl.constexpr):
    blk = tl.program_id(0).to(tl.int64)  # int64: blk * BLOCK can pass 2^31 elements
    idx = blk * BLOCK + tl.arange(0, BLOCK)
    acc_dtype = tl.int64 if IS_INT else tl.float32
    x = tl.load(x_ptr + idx, mask=idx < N, other=0).to(acc_dtype)
    tl.store(sums_ptr + blk, tl.sum(x, axis=0))


@triton.jit
def _scan_sums_kernel(sums_ptr, B, IS_INT: tl.constexpr, BLOCK_S: tl.constexpr):
    offs = tl.arange(0, BLOCK_S)
    carry = tl.zeros((), tl.int64 if IS_INT else tl.float32)
    for start in range(0, B, BLOCK_S):  # exclusive scan in place, chunk by chunk
        idx = start + offs
        mask = idx < B
        s = tl.load(sums_ptr + idx, mask=mask, other=0)
        tl.store(sums_ptr + idx, tl.cumsum(s, axis=0) - s + carry, mask=mask)
        carry += tl.sum(s, axis=0)


@triton.jit
def _add_offsets_kernel(x_ptr, sums_ptr, y_ptr, N, IS_INT: tl.constexpr, BLOCK: tl.constexpr):
    blk = tl.program_id(0).to(tl.int64)
    idx = blk * BLOCK + tl.arange(0, BLOCK)
    mask = idx < N
    acc_dtype = tl.int64 if IS_INT else tl.float32
    x = tl.load(x_ptr + idx, mask=mask, other=0).to(acc_dtype)
    y = tl.cumsum(x, axis=0) + tl.load(sums_ptr + blk)  # local scan + sum of earlier blocks
    tl.store(y_ptr + idx, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n: int) -> dict[str, int]:
    """Return the block (2048, less for short x), the middle kernel's chunk and warps."""
    block = min(2048, max(triton.next_power_of_2(n), 16))
    b = triton.cdiv(max(n, 1), block)
    return {"block": block, "block_s": min(1024, max(triton.next_power_of_2(b), 16)),
            "num_warps": 8}  # fmt: skip


def cumsum_three_kernel_long_1d(
    x: torch.Tensor,
    *,
    block: int | None = None,
    block_s: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return the inclusive prefix sum of a 1-D x.

    Args:
        x: (N,) bf16/fp16/fp32/int32/int64 (non-contiguous input is copied).
        block: Elements per program in kernels 1 and 3 (power of two); None = min(2048, N).
        block_s: Block sums per loop step of kernel 2 (power of two); None picks by count.
        num_warps: Warps per program of kernels 1 and 3; None = 8.

    Returns:
        y: (N,) in x's dtype for floats, int64 for integers (as torch.cumsum).

    Raises:
        ValueError: x is not 1-D or has an unsupported dtype.
    """
    if x.dim() != 1 or x.dtype not in _FLOATS + _INTS:
        raise ValueError(
            f"x must be 1-D bf16/fp16/fp32/int32/int64; got {tuple(x.shape)} {x.dtype}"
        )
    is_int = x.dtype in _INTS
    xc = x.contiguous()
    n = xc.numel()
    y = torch.empty((n,), dtype=torch.int64 if is_int else x.dtype, device=x.device)
    if n == 0:
        return y
    cfg = _launch_config(n)
    given = {"block": block, "block_s": block_s, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    b = triton.cdiv(n, cfg["block"])
    sums = torch.empty((b,), dtype=torch.int64 if is_int else torch.float32, device=x.device)
    warps = cfg["num_warps"]
    _block_sums_kernel[(b,)](xc, sums, n, IS_INT=is_int, BLOCK=cfg["block"], num_warps=warps)
    _scan_sums_kernel[(1,)](sums, b, IS_INT=is_int, BLOCK_S=cfg["block_s"], num_warps=4)
    _add_offsets_kernel[(b,)](
        xc, sums, y, n, IS_INT=is_int, BLOCK=cfg["block"], num_warps=warps
    )  # fmt: skip
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return torch.cumsum(x, 0): in fp64 cast back for floats, int64 for ints."""
    if x.dtype in _INTS:
        return torch.cumsum(x, dim=0)
    return torch.cumsum(x.double(), dim=0).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` of length ``shape["size"]``: U(0, 1) floats (a growing sum) or ints."""
    n = shape["size"]
    if dtype in _INTS:
        return {"x": torch.randint(-100, 100, (n,), device=device, dtype=dtype)}
    return {"x": torch.rand(n, device=device).to(dtype)}
