"""
---
id: softmax_candidate
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, bf16, fp16]
bound: memory
techniques: [row-per-program, max-subtraction, fp32-accumulate]
status: candidate
measured: []
---
Row softmax with one program per row, as in the Triton tutorial: the whole row is one block
(padded to a power of two, masked lanes at -inf), the max, the exponentials and the sum are fp32
in registers, and the row is read once and written once: 4 + 4 bytes per element (fp32). Limit:
vocabulary-sized rows (32K-128K) make huge blocks that spill registers; the multirow variant loops
over the row instead.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    n_cols,
    # strides (elements)
    stride_x_row,
    stride_y_row,
    # meta
    BLOCK_N: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)  # int64: rows * stride can pass 2^31
    cols = tl.arange(0, BLOCK_N)
    mask = cols < n_cols

    # -inf in the padding: it never wins the max and exp(-inf) = 0 adds nothing to the sum
    x = tl.load(x_ptr + row * stride_x_row + cols, mask=mask, other=-float("inf"))
    x = x.to(tl.float32)
    z = x - tl.max(x, axis=0)  # subtract the max so exp cannot overflow
    num = tl.exp(z)
    y = num / tl.sum(num, axis=0)
    tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_config(n_cols: int) -> tuple[int, int]:
    """Return (BLOCK_N, num_warps): the whole row in one block, more warps for longer rows."""
    block_n = triton.next_power_of_2(n_cols)
    num_warps = min(max(block_n // 512, 1), 32)
    return block_n, num_warps


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Return the softmax of ``x`` over its last dimension as a new tensor."""
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols).contiguous()
    y = torch.empty_like(x2d)
    rows = x2d.shape[0]
    if rows == 0 or n_cols == 0:
        return y.view(x.shape)
    block_n, num_warps = _launch_config(n_cols)
    _softmax_row_kernel[(rows,)](
        x2d, y,
        n_cols,
        x2d.stride(0), y.stride(0),
        BLOCK_N=block_n,
        num_warps=num_warps,
    )  # fmt: skip
    return y.view(x.shape)


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return softmax(x)
