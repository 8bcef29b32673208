"""
---
id: softmax_dim0_columns
title: Softmax over dim 0 (down the columns), each program owns a tile of columns and loops rows
op_family: softmax
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [fp32, fp16, bf16]
bound: memory
techniques: [column-tile, strided-reduction, online-softmax, chunked-row-loop, fp32-accumulate]
status: reference
launcher: softmax_dim0_columns
tuning:
  block_m: [32, 8, 16, 64]
  block_n: [64, 16, 32, 128, 256]
  num_warps: [4, 1, 2, 8]
args:
  x: {shape: [M, N], dtypes: [fp32, fp16, bf16], layout: any, aliases: [input, logits]}
returns:
  - {name: y, shape: [M, N], dtype: x}
problem:
  shapes: [{rows: 70, cols: 50}, {rows: 5, cols: 3}]
  dtypes: [fp32, bf16]
  atol: 0.02
  rtol: 0.02
measured: []
---
softmax(x, dim=0) of a 2-D tensor, the reduction running down each column (e.g. normalising over
the sequence or the batch axis) without a transpose. Program j owns columns j*BLOCK_N.. and walks
the rows in (BLOCK_M x BLOCK_N) tiles: every tile row is BLOCK_N contiguous elements of one input
row, so loads stay coalesced although the reduction axis is the strided one. Pass 1 keeps a
per-(lane row, column) running max and a rescaled sum of exp (online softmax), combined over the
BLOCK_M lane rows after the loop; pass 2 re-reads the tiles and stores exp(x - max) / sum. Any
strides are accepted (a transposed view is read in place, slower). Bytes per element: 2 reads (the
second often from L2) and 1 write; 2 exponentials plus one rescale exp per element. Against
transpose + row softmax + transpose it saves two full copies. Limits: only cdiv(N, BLOCK_N)
programs, so a narrow N (< 64 * SMs columns) leaves SMs idle for a tall M (a split-M two-kernel
form would fix it); BLOCK_N below 32 gives short memory transactions.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _softmax_dim0_columns_kernel(
    # pointers
    x_ptr,
    y_ptr,
    # sizes
    M,
    N,
    # strides (elements)
    stride_xm,
    stride_xn,
    stride_ym,
    stride_yn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = (cols < N)[None, :]
    offs_m = tl.arange(0, BLOCK_M)

    # pass 1: online max and rescaled sum per (lane row, column); a finite floor avoids
    # exp(-inf - -inf) = NaN on lanes that only see padding
    m = tl.full((BLOCK_M, BLOCK_N), -1e30, dtype=tl.float32)
    s = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = (start + offs_m).to(tl.int64)[:, None]  # int64: rows * stride can pass 2^31
        mask = (rows < M) & col_mask
        x = tl.load(
            x_ptr + rows * stride_xm + cols[None, :] * stride_xn, mask=mask, other=float("-inf")
        )
        x = x.to(tl.float32)
        m_new = tl.maximum(m, x)
        s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
        m = m_new
    col_max = tl.max(m, axis=0)  # (BLOCK_N,)
    total = tl.sum(s * tl.exp(m - col_max[None, :]), axis=0)
    inv_sum = 1.0 / tl.where(total > 0.0, total, 1.0)  # padding columns sum to 0: no inf

    # pass 2: normalise and store
    for start in range(0, M, BLOCK_M):
        rows = (start + offs_m).to(tl.int64)[:, None]
        mask = (rows < M) & col_mask
        x = tl.load(
            x_ptr + rows * stride_xm + cols[None, :] * stride_xn, mask=mask, other=float("-inf")
        )
        y = tl.exp(x.to(tl.float32) - col_max[None, :]) * inv_sum[None, :]
        tl.store(
            y_ptr + rows * stride_ym + cols[None, :] * stride_yn,
            y.to(y_ptr.dtype.element_ty),
            mask=mask,
        )


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return a tile of up to 64 columns and 32 rows, 4 warps."""
    block_n = max(16, min(64, triton.next_power_of_2(n)))
    block_m = max(8, min(32, triton.next_power_of_2(m)))
    return {"block_m": block_m, "block_n": block_n, "num_warps": 4}


def softmax_dim0_columns(
    x: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    num_warps: int | None = None,
) -> torch.Tensor:
    """Return softmax(x, dim=0) of a 2-D tensor, reading it in place with any strides.

    Args:
        x: (M, N) fp32/fp16/bf16, any strides.
        block_m: Rows per tile (power of two); None = min(32, next_pow2(M)), at least 8.
        block_n: Columns per program (power of two); None = min(64, next_pow2(N)), at least 16.
        num_warps: Warps per program; None = 4.

    Returns:
        y: (M, N) in x's dtype, contiguous; computed in fp32, rounded once.

    Raises:
        ValueError: x is not a 2-D float tensor, M is 0, or a block size is not a power of two.
    """
    if x.dim() != 2 or not x.is_floating_point():
        raise ValueError(f"x must be a 2-D float tensor (M, N); got {x.dtype} {tuple(x.shape)}")
    m, n = x.shape
    if m == 0:
        raise ValueError(f"dim 0 (the softmax axis) must be at least 1; x is {tuple(x.shape)}")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if value is not None and (value < 1 or value & (value - 1)):
            raise ValueError(f"{name} must be a power of two; got {value}")
    y = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if n == 0:
        return y
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "num_warps": num_warps}
    cfg.update({key: value for key, value in given.items() if value is not None})
    _softmax_dim0_columns_kernel[(triton.cdiv(n, cfg["block_n"]),)](
        x, y,
        m, n,
        x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return y


def reference(x: torch.Tensor) -> torch.Tensor:
    """Return softmax(x, dim=0) computed in fp32 and cast to x's dtype."""
    return torch.softmax(x.float(), dim=0).to(x.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"x"}`` for ``shape = {"rows", "cols"}``: 3 * N(0, 1) + a per-column offset."""
    rows, cols = shape["rows"], shape["cols"]
    x = 3.0 * torch.randn(rows, cols, device=device) + 10.0 * torch.randn(1, cols, device=device)
    return {"x": x.to(dtype)}
