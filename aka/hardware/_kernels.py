# mypy: disable-error-code="no-untyped-def,untyped-decorator"
"""Triton kernels the hardware layer launches itself: the empty kernel and the FMA burner.

Owns ``launch_empty`` (the launch floor's kernel) and ``fma_burn`` (the vector fp32 ceiling's
kernel). Imports triton at module level, so only functions import this module (never
``aka.hardware.__init__``): ``import aka.hardware`` must not need triton or CUDA. On the CPU the
kernels run only under ``TRITON_INTERPRET=1`` set before this module is first imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl

if TYPE_CHECKING:
    import torch

__all__ = ["fma_burn", "launch_empty"]


@triton.jit
def _launch_floor_empty_kernel(out_ptr):
    # One program, one store: the least work a kernel can do and still be observable.
    tl.store(out_ptr, 1)


@triton.jit
def _ceiling_fma_kernel(
    # pointers
    x_ptr,
    out_ptr,
    # sizes and the affine map each step applies (runtime values, so nothing folds)
    n_elements,
    mul,
    add,
    # meta
    N_ITERS: tl.constexpr,
    N_ACC: tl.constexpr,
    BLOCK: tl.constexpr,
):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    # N_ACC independent dependency chains per element, each from a distinct start value so the
    # compiler cannot merge them: enough instruction-level parallelism to hide FMA latency.
    acc = x[:, None] + tl.arange(0, N_ACC)[None, :].to(tl.float32)
    for _ in range(N_ITERS):
        # acc -> acc * mul + add converges to add / (1 - mul): values stay finite for any run.
        acc = tl.fma(acc, mul, add)
    # Reading 4 bytes and writing 4 per element keeps memory traffic ~1% of the run time.
    tl.store(out_ptr + offs, tl.sum(acc, axis=1), mask=mask)


def launch_empty(out: torch.Tensor) -> None:
    """Launch the empty kernel once: one program that stores 1 into ``out[0]``.

    Args:
        out: (>=1,) int32 on the device the kernel runs on.
    """
    _launch_floor_empty_kernel[(1,)](out)


def fma_burn(
    x: torch.Tensor, out: torch.Tensor, *, n_iters: int, n_acc: int = 8, block: int = 1024
) -> int:
    """Run the FMA-bound kernel over ``x`` and return the FLOPs it performed.

    Each element runs ``n_acc`` independent chains of ``n_iters`` FMAs
    (``acc = fma(acc, 0.999, 0.001)``) and stores the sum of the chains into ``out``.

    Args:
        x: (N,) fp32, contiguous.
        out: (N,) fp32, contiguous, same device as ``x``.
        n_iters: FMA steps per chain (a compile-time constant of the kernel).
        n_acc: Independent chains per element; a power of two.
        block: Elements per program; a power of two.

    Returns:
        FLOPs performed: 2 per FMA, ``2 * N * n_acc * n_iters``.
    """
    n_elements = x.numel()
    grid = (triton.cdiv(n_elements, block),)
    _ceiling_fma_kernel[grid](
        x, out, n_elements, 0.999, 0.001, N_ITERS=n_iters, N_ACC=n_acc, BLOCK=block, num_warps=4
    )
    return 2 * n_elements * n_acc * n_iters
