"""
---
id: max_abs_atomic
title: Global abs-max of a tensor in one pass, per-program maxima merged by int32 atomic_max
op_family: reduction
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [persistent-grid, grid-stride-loop, atomic-reduction, float-bits-as-int, single-pass]
status: reference
launcher: max_abs_atomic
tuning:
  block: [4096, 1024, 2048, 8192]
  programs_per_sm: [4, 1, 2, 8]
  num_warps: [8, 2, 4, 16]
args:
  x: {shape: ['...'], dtypes: [bf16, fp16, fp32], layout: any, aliases: [input, tensor]}
returns:
  - {name: amax, shape: [], dtype: fp32}
problem:
  shapes: [{size: [3, 1000]}, {size: [17]}]
  dtypes: [fp32, bf16]
measured: []
---
amax = max |x| over the whole tensor in fp32 (the scale input of per-tensor fp8 quantisation), in
one launch. A persistent grid of min(blocks, programs_per_sm * SMs) programs strides over the
BLOCK-wide blocks keeping a per-lane running max of |x|, reduces it once, and merges it into the
result with a single tl.atomic_max on the int32 view of the fp32 result: for non-negative floats
the IEEE bit pattern orders like the value, so an integer max is a float max, with no
compare-and-swap loop and one atomic per program (a few hundred in all, so no contention). The
result buffer starts at 0 (bits 0x00000000 = +0.0), which is also the amax of an empty tensor. Max
is exact and order-free, so unlike a float atomic sum the result is deterministic. Bytes: one read
per element (2 B in bf16) and 4 B of atomics per program. Limits: NaNs are not propagated (a NaN
lane may or may not win); -0.0 is folded to +0.0 by the abs; non-contiguous x is copied first.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _max_abs_atomic_kernel(
    # pointers
    x_ptr,
    amax_ptr,  # int32 (1,): the bits of the fp32 result, starting at 0
    # sizes
    n,
    # meta
    BLOCK: tl.constexpr,
):
    # int64 start makes the loop variable int64: blk * BLOCK can pass 2^31 elements
    pid = tl.program_id(0).to(tl.int64)
    num_programs = tl.num_programs(0)
    offs = tl.arange(0, BLOCK)
    lane_max = tl.zeros((BLOCK,), tl.float32)  # |x| >= 0, so 0 is the identity
    for blk in range(pid, tl.cdiv(n, BLOCK), num_programs):
        idx = blk * BLOCK + offs
        x = tl.load(x_ptr + idx, mask=idx < n, other=0.0).to(tl.float32)
        lane_max = tl.maximum(lane_max, tl.abs(x))
    local = tl.max(lane_max, axis=0)
    # non-negative fp32 bit patterns order like their values: an int max is the float max
    tl.atomic_max(amax_ptr, local.to(tl.int32, bitcast=True))


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _launch_config(n: int) -> dict[str, int]:
    """Return the block (4096 elements, less for tiny tensors), programs per SM and warps."""
    block = min(4096, max(triton.next_power_of_2(n), 16))
    return {"block": block, "programs_per_sm": 4, "num_warps": 8}


def max_abs_atomic(
    x: torch.Tensor,
    *,
    block: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return max(|x|) over all elements as a 0-d fp32 tensor (0 for an empty x).

    Args:
        x: Any shape, bf16/fp16/fp32 (non-contiguous input is copied).
        block: Elements per program per loop step (power of two); None = 4096.
        programs_per_sm: Persistent programs per SM (grid = min(blocks, this * SMs)); None = 4.
        num_warps: Warps per program; None = 8.

    Returns:
        amax: 0-d fp32 tensor.

    Raises:
        ValueError: Unsupported dtype.
    """
    if x.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"x must be bf16/fp16/fp32; got {x.dtype}")
    flat = x.reshape(-1).contiguous()
    bits = torch.zeros((1,), dtype=torch.int32, device=x.device)  # +0.0
    n = flat.numel()
    if n == 0:
        return bits.view(torch.float32).reshape(())
    cfg = _launch_config(n)
    given = {"block": block, "programs_per_sm": programs_per_sm, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (min(triton.cdiv(n, cfg["block"]), cfg["programs_per_sm"] * _num_sms(x.device)),)
    _max_abs_atomic_kernel[grid](
        flat, bits, n, BLOCK=cfg["block"], num_warps=cfg["num_warps"]
    )  # fmt: skip
    return bits.view(torch.float32).reshape(())


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return x.abs().amax() in fp32 (0 for an empty x)."""
    if x.numel() == 0:
        return torch.zeros((), dtype=torch.float32, device=x.device)
    return x.float().abs().amax()


def make_inputs(shape: dict, dtype: torch.dtype = torch.float32, device: str = "cpu") -> dict:
    """Return ``{"x"}`` of size ``shape["size"]`` (a list): N(0, 1) values in ``dtype``."""
    return {"x": torch.randn(*shape["size"], device=device).to(dtype)}
