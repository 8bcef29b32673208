"""
---
id: gemm_tensor_descriptor_sm90
title: GEMM C = A @ B^T whose tiles move through device-side tensor descriptors (TMA on sm_90)
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [tensor-descriptor, tma, tl-dot, fp32-accumulate, grouped-program-order,
  hardware-bounds-handling]
status: reference
launcher: gemm_tensor_descriptor_sm90
tuning:
  block_m: [128, 64]
  block_n: [128, 64, 256]
  block_k: [64, 32, 128]
  group_m: [8, 1]
  num_warps: [8, 4]
  num_stages: [3, 2, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], aliases: [x, input]}
  b: {shape: [N, K], like: a, aliases: [w, weight]}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 33, n: 40, k: 72}, {m: 1, n: 16, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
C = A @ B^T with every tile moved by a tensor descriptor built inside the kernel with
tl.make_tensor_descriptor (global shape, strides and block shape). On Hopper the compiler lowers
desc.load / desc.store to TMA bulk copies: one thread issues a whole (BLOCK_M, BLOCK_K) box, the
copy engine writes it to shared memory in the swizzled layout wgmma reads, and rows or columns
past the tensor's edge are zero-filled on loads and dropped on stores by the hardware, so the
kernel has no pointer arithmetic and no masks at all. That frees the registers and issue slots
that pointer-based tiles spend on address and mask vectors, which is what lets 128x128 or
128x256 bf16 tiles with 3-4 pipeline stages stay fed; the C tile also leaves through a TMA store.
B (N, K) is loaded as (BLOCK_N, BLOCK_K) boxes and transposed in shared memory for the MMA. Grid:
one program per output tile, grouped by GROUP_M row tiles for L2 reuse. Limits: TMA needs 16-byte
aligned base addresses and row strides (K and N multiples of 8 for bf16, 4 for fp32) and a
contiguous last dimension; descriptors built on the device need a global scratch allocator
(triton.set_allocator, set by the launcher); before sm_90 Triton falls back to ordinary loads.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_tensor_descriptor_kernel(
    # pointers (row-major, 16-byte aligned)
    a_ptr,
    b_ptr,
    c_ptr,
    # sizes
    M,
    N,
    K,
    # meta
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = min(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    # descriptors: the hardware handles bounds (zero fill on load, clipping on store)
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BLOCK_M, BLOCK_K])
    b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [K, 1], [BLOCK_N, BLOCK_K])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BLOCK_M, BLOCK_N])
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k_start in range(0, K, BLOCK_K):
        a = a_desc.load([off_m, k_start])
        b = b_desc.load([off_n, k_start])
        if UPCAST:
            # CPU interpreter: its bf16 tl.dot is wrong, so multiply exact fp32 copies
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32).T, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b.T, acc)  # wgmma reads both tiles from shared memory
    c_desc.store([off_m, off_n], acc.to(c_ptr.dtype.element_ty))


def _alloc_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    """Global scratch for descriptors built on the device (Triton asks for it per launch)."""
    return torch.empty(size, device="cuda", dtype=torch.int8)


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def _launch_config(m: int) -> dict[str, int]:
    """Return 128x128x64 tiles (64-row tiles for decode M), 8 warps, 3 stages."""
    block_m = 64 if m <= 64 else 128
    return {"block_m": block_m, "block_n": 128, "block_k": 64, "group_m": 8,
            "num_warps": 4 if block_m == 64 else 8, "num_stages": 3}  # fmt: skip


def gemm_tensor_descriptor_sm90(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    group_m: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T with TMA tensor-descriptor tiles.

    Args:
        a: (M, K) bf16/fp16/fp32, row-major (copied if not), K * itemsize a multiple of 16.
        b: (N, K) same dtype, row-major (copied if not).
        block_m: Rows per program (64 or 128); None picks by M.
        block_n: Columns per program (power of two >= 16); None = 128.
        block_k: K step (power of two >= 16); None = 64.
        group_m: Row tiles per group of the grouped order; None = 8.
        num_warps: Warps per program; None picks by tile.
        num_stages: Pipeline depth of the TMA loads; None = 3.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous.

    Raises:
        ValueError: The shapes or dtypes do not fit, or rows break TMA's 16-byte alignment.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16, torch.float32) or b.dtype != a.dtype:
        raise ValueError(f"need matching bf16/fp16/fp32 A and B; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    size = a.element_size()
    if (k * size) % 16 or (n * size) % 16:
        raise ValueError(
            f"TMA needs 16-byte row strides: K = {k} and N = {n} must be multiples of "
            f"{16 // size} for {a.dtype}; pad them or use a pointer-based GEMM"
        )
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    if a.device.type == "cuda":
        triton.set_allocator(_alloc_scratch)
    cfg = _launch_config(m)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k, "group_m": group_m,
             "num_warps": num_warps, "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    grid = (triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"]),)
    _gemm_tensor_descriptor_kernel[grid](
        a, b, c, m, n, k,
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        GROUP_M=cfg["group_m"], UPCAST=_interpreting(),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Return A @ B^T computed in fp32 and cast to A's dtype."""
    return (a.float() @ b.float().T).to(a.dtype)


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return ``{"a", "b"}`` for ``{"m", "n", "k"}`` (K, N multiples of 8): N(0, 1), K^-1/2 B."""
    m, n, k = shape["m"], shape["n"], shape["k"]
    return {
        "a": torch.randn(m, k, device=device).to(dtype),
        "b": (torch.randn(n, k, device=device) * k**-0.5).to(dtype),
    }
