"""
---
id: gemm_persistent_tiles
title: Persistent GEMM C = A @ B^T, one program per SM looping over output tiles in grouped order
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [persistent-grid, grid-stride-tiles, grouped-program-order, l2-reuse, tiled-tl-dot,
  fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_persistent_tiles
tuning:
  block_m: [128, 64]
  block_n: [128, 64, 256]
  block_k: [64, 32]
  group_m: [8, 1, 16]
  programs_per_sm: [1, 2]
  num_warps: [8, 4]
  num_stages: [3, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, mat1]}
  b: {shape: [N, K], like: a, layout: any, aliases: [w, weight, mat2]}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 130, n: 130, k: 40}, {m: 1, n: 17, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
C = A @ B^T (B in the (N, K) weight layout) on a persistent grid: min(tiles, programs_per_sm * SMs)
programs are launched once, and program p computes output tiles p, p + grid, p + 2 * grid, ...
Tile ids are mapped to (row tile, column tile) in grouped order (GROUP_M row tiles side by side down
a column of tiles), and since all programs advance through the id space in lock step, the tiles in
flight at any moment form a compact band whose A rows and B columns fit in L2. Each tile is the
usual K loop of tl.dot into an fp32 accumulator, cast once at the store. Compared with one program
per tile it pays the launch and the program prologue once per SM rather than once per tile, and
the epilogue store of one tile overlaps the next tile's first loads on the GPU. FLOPs 2*M*N*K;
bytes A and B once from HBM when the band fits in L2, C once. Limits: when the tile count is not a
multiple of the grid the last wave is partly idle (stream-K fixes that); no TMA or warp
specialisation (Hopper's persistent kernels add both); small problems gain nothing.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_persistent_tiles_kernel(
    # pointers
    a_ptr,
    b_ptr,
    c_ptr,
    # sizes
    M,
    N,
    K,
    # strides (elements)
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    offs_k = tl.arange(0, BLOCK_K)

    # persistent loop: this program owns tiles pid, pid + grid, pid + 2 * grid, ...
    for tile in range(pid, tiles_m * tiles_n, num_programs):
        # grouped order: GROUP_M row tiles share each column of B tiles
        first_m = (tile // per_group) * GROUP_M
        rows_in_group = min(tiles_m - first_m, GROUP_M)
        pid_m = first_m + (tile % per_group) % rows_in_group
        pid_n = (tile % per_group) // rows_in_group

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < M
        mask_n = offs_n < N
        a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = b_ptr + offs_n[None, :].to(tl.int64) * stride_bn + offs_k[:, None] * stride_bk

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k_start in range(0, K, BLOCK_K):
            mask_k = offs_k < K - k_start
            a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            if UPCAST:
                # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
                acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
            else:
                acc = tl.dot(a, b, acc)  # bf16/fp16 MMA (TF32 for fp32) into fp32
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk

        c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles, group, programs per SM, warps and stages: 128x128 when big, else 64x64."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 64, "group_m": 8,
                "programs_per_sm": 1, "num_warps": 8, "num_stages": 3}  # fmt: skip
    return {"block_m": 64, "block_n": 64, "block_k": 32, "group_m": 8, "programs_per_sm": 2,
            "num_warps": 4, "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_persistent_tiles(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T computed by a persistent grid of programs.

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        b: (N, K) same dtype as ``a`` (a linear layer's weight layout), any strides.
        block_m: Rows of C per tile (power of two >= 16); None picks by size.
        block_n: Columns of C per tile (power of two >= 16); None picks by size.
        block_k: K step of the inner loop (power of two >= 16); None picks by size.
        group_m: Row tiles per group of the grouped tile order; None = 8.
        programs_per_sm: Persistent programs per SM (grid = min(tiles, this * SMs)).
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None picks by size.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need matching bf16/fp16/fp32 inputs; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "programs_per_sm": programs_per_sm, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    tiles = triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"])
    grid = (min(tiles, cfg["programs_per_sm"] * _num_sms(a.device)),)
    _gemm_persistent_tiles_kernel[grid](
        a, b, c,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T computed in fp32 and cast to A's dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"m", "n", "k"}``: N(0, 1) activations, K^-0.5 weights."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    a = torch.randn(m, k, device=device).to(dtype)
    b = (torch.randn(n, k, device=device) * k**-0.5).to(dtype)
    return {"a": a, "b": b}
