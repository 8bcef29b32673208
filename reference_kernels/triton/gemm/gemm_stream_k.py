"""
---
id: gemm_stream_k
title: Stream-K GEMM C = A @ B^T, programs split the total K iterations evenly, atomic tile fix-up
op_family: gemm
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: compute
techniques: [stream-k, persistent-grid, even-work-split, atomic-fixup, last-arriver-epilogue,
  tiled-tl-dot, fp32-accumulate, weight-layout-b]
status: reference
launcher: gemm_stream_k
tuning:
  block_m: [128, 64, 32]
  block_n: [128, 64, 32]
  block_k: [64, 32]
  programs_per_sm: [1, 2]
  num_warps: [8, 4]
  num_stages: [3, 4]
args:
  a: {shape: [M, K], dtypes: [bf16, fp16, fp32], layout: any, aliases: [x, input, mat1]}
  b: {shape: [N, K], like: a, layout: any, aliases: [w, weight, mat2]}
returns:
  - {name: c, shape: [M, N], dtype: a}
problem:
  shapes: [{m: 33, n: 48, k: 200}, {m: 1, n: 17, k: 200}]
  dtypes: [fp32, bf16]
  allow_tf32: true
measured: []
---
C = A @ B^T where the unit of work is one BLOCK_K step of one output tile ("iteration"); the
tiles * cdiv(K, BLOCK_K) iterations are laid end to end and cut into P = programs_per_sm * SMs
contiguous ranges whose lengths differ by at most one, so every SM gets the same work whatever the
tile count (no partly idle last wave as in tile-per-program or persistent grids). A program walks
its range tile by tile: a tile it covers whole is stored directly; a tile it covers only in part
(at most two per program: the head and the tail of its range) is fixed up through an fp32
workspace: the partial sum is atomically added there, then an acq_rel atomic on the tile's counter
adds the number of K iterations contributed, and the program that completes the count (the last
arriver) reads the finished sum back and writes the cast tile, so no separate reduction or cast
kernel runs. FLOPs 2*M*N*K; bytes A and B once plus C once, plus 8 B per element of each split
tile (atomic add and read back) and one zeroed workspace. Wins when the tile count is small or not
a multiple of the SM count (e.g. 1.2 waves), where it fills every SM. Limits: the fp32 atomic sum
is not bitwise deterministic; the workspace memset costs a small extra launch; when tiles >> SMs
plain persistent tiling is as good with less overhead.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _gemm_stream_k_kernel(
    # pointers
    a_ptr,
    b_ptr,
    c_ptr,
    ws_ptr,  # fp32 (M, N) workspace for split tiles, zeroed
    count_ptr,  # int32 (tiles,) K iterations finished per tile, zeroed
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
    UPCAST: tl.constexpr,
):
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    k_iters = tl.cdiv(K, BLOCK_K)
    total = tl.cdiv(M, BLOCK_M) * tiles_n * k_iters
    # even split: the first (total % P) programs take one iteration more
    base = total // num_programs
    extra = total % num_programs
    it = pid * base + tl.minimum(pid, extra)
    end = it + base + (pid < extra).to(tl.int32)
    offs_k = tl.arange(0, BLOCK_K)

    while it < end:
        tile = it // k_iters
        k_lo = it % k_iters
        k_hi = tl.minimum(k_iters, k_lo + (end - it))
        pid_m = tile // tiles_n
        pid_n = tile % tiles_n
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < M
        mask_n = offs_n < N
        mask_c = mask_m[:, None] & mask_n[None, :]
        a_ptrs = (a_ptr + offs_m[:, None].to(tl.int64) * stride_am
                  + (k_lo * BLOCK_K + offs_k[None, :]) * stride_ak)  # fmt: skip
        b_ptrs = (b_ptr + offs_n[None, :].to(tl.int64) * stride_bn
                  + (k_lo * BLOCK_K + offs_k[:, None]) * stride_bk)  # fmt: skip

        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kk in range(k_lo, k_hi):
            mask_k = offs_k < K - kk * BLOCK_K
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
        if (k_lo == 0) & (k_hi == k_iters):
            # this program covered the whole tile: no fix-up
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_c)
        else:
            ws_ptrs = ws_ptr + offs_m[:, None].to(tl.int64) * N + offs_n[None, :]
            tl.atomic_add(ws_ptrs, acc, mask=mask_c, sem="relaxed")
            # release our partial, acquire the others'; the last arriver writes the tile
            done = tl.atomic_add(count_ptr + tile, k_hi - k_lo, sem="acq_rel")
            if done + (k_hi - k_lo) == k_iters:
                total_tile = tl.load(ws_ptrs, mask=mask_c, other=0.0, cache_modifier=".cg")
                tl.store(c_ptrs, total_tile.to(c_ptr.dtype.element_ty), mask=mask_c)
        it += k_hi - k_lo


def _num_sms(device: torch.device) -> int:
    """Return the device's SM count (4 on the CPU, where the interpreter runs tests)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 4


def _launch_config(m: int, n: int) -> dict[str, int]:
    """Return tiles, programs per SM, warps and stages: 128x128 when big, else 64x64."""
    if m >= 512 and n >= 512:
        return {"block_m": 128, "block_n": 128, "block_k": 64, "programs_per_sm": 1,
                "num_warps": 8, "num_stages": 3}  # fmt: skip
    return {"block_m": 64, "block_n": 64, "block_k": 32, "programs_per_sm": 1, "num_warps": 4,
            "num_stages": 3}  # fmt: skip


def _interpreting() -> bool:
    """Return whether Triton runs in its CPU interpreter (it then needs fp32 tl.dot operands)."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def gemm_stream_k(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    block_m: int | None = None,
    block_n: int | None = None,
    block_k: int | None = None,
    programs_per_sm: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> torch.Tensor:
    """Return C = A @ B^T with the K iterations of all tiles split evenly over the programs.

    Args:
        a: (M, K) bf16/fp16/fp32, any strides.
        b: (N, K) same dtype as ``a`` (a linear layer's weight layout), any strides.
        block_m: Rows of C per tile (power of two >= 16); None picks by size.
        block_n: Columns of C per tile (power of two >= 16); None picks by size.
        block_k: K step, the unit of work (power of two >= 16); None picks by size.
        programs_per_sm: Programs per SM (grid = min(iterations, this * SMs)); None = 1.
        num_warps: Warps per program; None picks by size.
        num_stages: Software-pipelining depth on the GPU; None picks by size.

    Returns:
        C: (M, N) in ``a``'s dtype, contiguous, accumulated in fp32.

    Raises:
        ValueError: The shapes or dtypes do not fit, or K is 0.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"need A (M, K) and B (N, K); got A {tuple(a.shape)}, B {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16, torch.float32):
        raise ValueError(f"need matching bf16/fp16/fp32 inputs; got {a.dtype} and {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if k == 0:
        raise ValueError(f"K is 0 (A {tuple(a.shape)}): there are no iterations to split")
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    if m == 0 or n == 0:
        return c
    cfg = _launch_config(m, n)
    given = {"block_m": block_m, "block_n": block_n, "block_k": block_k,
             "programs_per_sm": programs_per_sm, "num_warps": num_warps,
             "num_stages": num_stages}  # fmt: skip
    cfg.update({key: value for key, value in given.items() if value is not None})
    tiles = triton.cdiv(m, cfg["block_m"]) * triton.cdiv(n, cfg["block_n"])
    iterations = tiles * triton.cdiv(k, cfg["block_k"])
    grid = (min(iterations, cfg["programs_per_sm"] * _num_sms(a.device)),)
    workspace = torch.zeros((m, n), dtype=torch.float32, device=a.device)
    counts = torch.zeros((tiles,), dtype=torch.int32, device=a.device)
    _gemm_stream_k_kernel[grid](
        a, b, c, workspace, counts,
        m, n, k,
        a.stride(0), a.stride(1),
        b.stride(0), b.stride(1),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["block_m"], BLOCK_N=cfg["block_n"], BLOCK_K=cfg["block_k"],
        UPCAST=_interpreting(),
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
