"""
---
id: csr_spmv_row_per_program
title: Sparse CSR matrix times dense vector, one program per row looping over its nonzeros
op_family: other
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [row-per-program, csr, gather, chunked-loop, data-dependent-trip-count, fp32-accumulate]
status: reference
launcher: csr_spmv_row_per_program
tuning:
  block_nnz: [64, 16, 32, 128, 256]
  num_warps: [2, 1, 4, 8]
args:
  crow_indices: {shape: [R], dtypes: [int32, int64], aliases: [indptr, row_ptr, crow]}
  col_indices: {shape: [NNZ], dtypes: [int32, int64], aliases: [indices, col_idx]}
  values: {shape: [NNZ], dtypes: [bf16, fp16, fp32], aliases: [data, vals]}
  x: {shape: [N], like: values, aliases: [vector, dense]}
returns:
  - {name: y, shape: ['R - 1'], dtype: values}
problem:
  shapes: [{rows: 20, cols: 300, density: 0.3}]
  dtypes: [fp32]
measured: []
---
y = A @ x for a CSR matrix A (M rows: crow_indices has M + 1 entries, row i owns the nonzeros
crow_indices[i]:crow_indices[i+1] of col_indices / values) and a dense vector x of length N. One
program per row reads its two row pointers, then walks the row's nonzeros in BLOCK_NNZ chunks (a
loop whose trip count is read from memory): contiguous loads of column ids and values, a gather of
x at those columns, an fp32 multiply-accumulate, and a single tree sum and store at the end. Bytes
per nonzero: the value (2-4 B) and column id (4-8 B) streamed once plus one x gather (cached in L2
when x fits). Wins for rows with tens to thousands of nonzeros (graph and pruned-weight matrices),
where a whole program per row keeps enough loads in flight. Limits: power-law matrices whose longest
rows hold most nonzeros leave one SM doing them (use a merge-path or row-split kernel); very short
rows waste most lanes of a BLOCK_NNZ chunk (use a warp-per-row or vector-per-row kernel); column
ids are not checked against N on the device.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _csr_spmv_kernel(
    crow_ptr,
    col_ptr,
    val_ptr,
    x_ptr,
    y_ptr,
    BLOCK_NNZ: tl.constexpr,
):
    row = tl.program_id(0)
    start = tl.load(crow_ptr + row).to(tl.int64)
    end = tl.load(crow_ptr + row + 1).to(tl.int64)
    offs = tl.arange(0, BLOCK_NNZ)
    acc = tl.zeros((BLOCK_NNZ,), dtype=tl.float32)
    for k in range(start, end, BLOCK_NNZ):  # trip count read from memory
        idx = k + offs
        nz = idx < end
        cols = tl.load(col_ptr + idx, mask=nz, other=0)
        vals = tl.load(val_ptr + idx, mask=nz, other=0.0).to(tl.float32)
        xs = tl.load(x_ptr + cols, mask=nz, other=0.0).to(tl.float32)
        acc += vals * xs
    tl.store(y_ptr + row, tl.sum(acc, axis=0).to(y_ptr.dtype.element_ty))


def csr_spmv_row_per_program(
    crow_indices: torch.Tensor,
    col_indices: torch.Tensor,
    values: torch.Tensor,
    x: torch.Tensor,
    *,
    block_nnz: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return A @ x for the CSR matrix A = (crow_indices, col_indices, values).

    Args:
        crow_indices: (M + 1,) int32/int64 row pointers, crow_indices[0] = 0, non-decreasing.
        col_indices: (NNZ,) int32/int64 column ids in [0, N).
        values: (NNZ,) bf16/fp16/fp32 nonzeros.
        x: (N,) dense vector with values' dtype.
        block_nnz: Nonzeros per loop step (power of two); None = 64.
        num_warps: Warps per program; None = 2.

    Returns:
        y: (M,) with values' dtype.

    Raises:
        ValueError: A bad rank, dtype or length. The row pointers' contents are not checked here
            (that needs a device-to-host read); ``check_inputs`` does it outside the timed call.
    """
    for name, t in (("crow_indices", crow_indices), ("col_indices", col_indices)):
        if t.dim() != 1 or t.dtype not in (torch.int32, torch.int64):
            raise ValueError(
                f"{name} must be a 1-D int32/int64 tensor; got {t.dtype} {tuple(t.shape)}"
            )
    if values.dim() != 1 or values.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(
            f"values must be 1-D fp32/fp16/bf16; got {values.dtype} {tuple(values.shape)}"
        )
    if x.dim() != 1 or x.dtype != values.dtype:
        raise ValueError(f"x must be 1-D {values.dtype}; got {x.dtype} {tuple(x.shape)}")
    if col_indices.numel() != values.numel() or crow_indices.numel() < 1:
        raise ValueError(
            f"col_indices ({col_indices.numel()}) and values ({values.numel()}) must have the same "
            f"length and crow_indices must have M + 1 >= 1 entries"
        )
    m = crow_indices.numel() - 1
    y = torch.empty(m, dtype=values.dtype, device=values.device)
    if m == 0:
        return y
    _csr_spmv_kernel[(m,)](
        crow_indices.contiguous(), col_indices.contiguous(), values.contiguous(), x.contiguous(), y,
        BLOCK_NNZ=block_nnz or 64,
        num_warps=num_warps or 2,
    )  # fmt: skip
    return y


def check_inputs(
    crow_indices: torch.Tensor, col_indices: torch.Tensor, values: torch.Tensor, x: torch.Tensor
) -> None:
    """Check the CSR structure's contents (host reads; call it outside the timed launcher).

    Args:
        crow_indices: (M + 1,) row pointers.
        col_indices: (NNZ,) column ids.
        values: (NNZ,) nonzeros.
        x: (N,) dense vector.

    Raises:
        ValueError: crow_indices does not start at 0, decreases or does not end at NNZ, or a
            column id is outside [0, N).
    """
    nnz = values.numel()
    if int(crow_indices[0]) != 0 or int(crow_indices[-1]) != nnz:
        raise ValueError(
            f"crow_indices must run from 0 to nnz {nnz}; got {int(crow_indices[0])}.."
            f"{int(crow_indices[-1])}"
        )
    if bool((crow_indices[1:] < crow_indices[:-1]).any()):
        raise ValueError("crow_indices must be non-decreasing")
    if nnz and (int(col_indices.min()) < 0 or int(col_indices.max()) >= x.numel()):
        raise ValueError(f"col_indices must lie in [0, {x.numel()})")


def reference(
    crow_indices: torch.Tensor, col_indices: torch.Tensor, values: torch.Tensor, x: torch.Tensor
) -> torch.Tensor:
    """Return A @ x in fp32 (scatter-add of values * x[cols] into rows), cast to values' dtype."""
    m = crow_indices.numel() - 1
    rows = torch.repeat_interleave(
        torch.arange(m, device=values.device), (crow_indices[1:] - crow_indices[:-1]).long()
    )
    prod = values.float() * x.float()[col_indices.long()]
    y = torch.zeros(m, dtype=torch.float32, device=values.device).index_add_(0, rows, prod)
    return y.to(values.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return CSR inputs for ``shape = {"rows", "cols", "density"}``; N(0, 1) values and x.

    The row lengths depend only on the shape (a fixed hash spread over 0..2 * density * cols, so
    row 0 is empty and the mean is about density * cols), so every seed gives the same nnz and
    row pointers; the columns of each row (distinct, ascending) and the values are random.
    """
    m, n = shape["rows"], shape["cols"]
    mean = shape.get("density", 0.1) * n
    spread = (torch.arange(m, dtype=torch.int64) * 2654435761 % 1000).double() / 1000
    lengths = (2 * mean * spread).round().long().clamp(max=n).to(device)
    rank = torch.rand(m, n, device=device).argsort(dim=1).argsort(dim=1)
    keep = rank < lengths[:, None]  # a random lengths[i] columns of row i
    _, cols = keep.nonzero(as_tuple=True)  # row-major order, as CSR stores them
    crow = torch.zeros(m + 1, dtype=torch.int64, device=device)
    crow[1:] = torch.cumsum(lengths, 0)
    return {
        "crow_indices": crow,
        "col_indices": cols,
        "values": torch.randn(cols.numel(), device=device).to(dtype),
        "x": torch.randn(n, device=device).to(dtype),
    }
