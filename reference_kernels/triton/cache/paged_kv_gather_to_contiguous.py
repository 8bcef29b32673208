"""
---
id: paged_kv_gather_to_contiguous
title: Gather each sequence's KV pages (block table, seq lens) into contiguous packed varlen K and V
op_family: cache
dsl: triton
vendor: nvidia
arch: [sm_80, sm_90]
dtypes: [bf16, fp16, fp32]
bound: memory
techniques: [gather, block-table, varlen, cu-seqlens, 2d-grid, early-exit, chunked-loop]
status: reference
launcher: paged_kv_gather_to_contiguous
tuning:
  block_t: [16, 1, 4, 32, 64]
  block_c: [256, 64, 128, 512, 1024]
  num_warps: [4, 1, 2, 8]
args:
  key_cache: {shape: [NB, BS, H, D], dtypes: [bf16, fp16, fp32], layout: any, aliases: [k_cache]}
  value_cache: {shape: [NB, BS, H, D], like: key_cache, layout: any, aliases: [v_cache]}
  block_table: {shape: [B, MB], dtypes: [int32, int64], aliases: [block_tables]}
  seq_lens: {shape: [B], dtypes: [int32, int64], aliases: [context_lens, seqlens]}
  total_tokens: {type: int, aliases: [num_tokens, total_seqlen, num_actual_tokens]}
  max_seqlen: {type: int, default: null, aliases: [max_seq_len, max_context_len]}
returns:
  - {name: key, shape: [total_tokens, H, D], dtype: key_cache}
  - {name: value, shape: [total_tokens, H, D], dtype: key_cache}
  - {name: cu_seqlens, shape: ['?'], dtype: int32}
problem:
  shapes: [{seq_lens: [5, 17, 0, 8], heads: 2, head_dim: 16}]
  dtypes: [fp32]
measured: []
---
The inverse of the paged cache write, as prefix-cache reuse and chunked-prefill attention backends
need it: sequence b's first seq_lens[b] cached tokens, spread over the pages block_table[b, 0..],
are copied into packed contiguous K and V of shape (sum(seq_lens), H, D), sequence b at rows
[cu[b], cu[b + 1]) with cu the exclusive prefix sum of seq_lens (also returned, int32), computed
on the device by a one-program scan kernel before the gather. Program (b, i) owns tokens
[i * BLOCK_T, (i + 1) * BLOCK_T) of sequence b: it exits at once when the tile starts past
seq_lens[b] (the grid is sized by max_seqlen, or by total_tokens when the caller does not give
it), else it reads one page id per
token (token p lives in page block_table[b, p // BS], row p % BS) and copies the tokens' H * D
values in (BLOCK_T, BLOCK_C) chunks, reading the cache through its full 4-D strides ((h, d) =
divmod(column, D)) and writing contiguous rows. Bytes: 2 * H * D elements read and written per
token, plus one 4-byte page id per token. When it wins: materialising a long cached prefix once
for a dense varlen attention kernel. Limits: the output length total_tokens (= sum(seq_lens)) and
the optional max_seqlen are the caller's host-side counts, as in flash-attn's varlen API, so the
launcher never reads seq_lens on the host; check_inputs verifies them with a sync, outside the
launch. The kernel never writes past total_tokens rows nor reads past a table row (tokens beyond
max_blocks * block_size are dropped); tokens past max_seqlen are not gathered.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _cu_seqlens_kernel(
    # pointers
    seq_lens_ptr,
    cu_ptr,  # (B + 1,) int32, zero-filled: cu[0] stays 0
    # sizes
    B,
    # meta
    BLOCK_B: tl.constexpr,
):
    # one program scans all B lengths in BLOCK_B chunks, carrying the running total
    carry = tl.sum(tl.zeros([BLOCK_B], dtype=tl.int32), axis=0)
    for b0 in range(0, B, BLOCK_B):
        offs = b0 + tl.arange(0, BLOCK_B)
        lens = tl.load(seq_lens_ptr + offs, mask=offs < B, other=0).to(tl.int32)
        tl.store(cu_ptr + 1 + offs, carry + tl.cumsum(lens, axis=0), mask=offs < B)
        carry += tl.sum(lens, axis=0)


@triton.jit
def _paged_kv_gather_kernel(
    # pointers
    key_cache_ptr,
    value_cache_ptr,
    table_ptr,
    seq_lens_ptr,
    cu_ptr,
    key_ptr,
    value_ptr,
    # sizes
    HD,
    D,
    block_size,
    max_tokens,  # max_blocks * block_size: tokens past a table row are dropped
    total_tokens,  # rows of key/value: never written past
    # strides (elements)
    stride_table,
    skb, skr, skh, skd,
    svb, svr, svh, svd,
    # meta
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
):  # fmt: skip
    seq = tl.program_id(0)
    t0 = tl.program_id(1) * BLOCK_T
    seq_len = tl.minimum(tl.load(seq_lens_ptr + seq), max_tokens)
    if t0 < seq_len:  # programs past this sequence's end do nothing
        pos = t0 + tl.arange(0, BLOCK_T)
        dst = tl.load(cu_ptr + seq).to(tl.int64) + pos
        t_ok = (pos < seq_len) & (dst < total_tokens)
        page = tl.load(table_ptr + seq * stride_table + pos // block_size, mask=t_ok, other=0)
        page = page.to(tl.int64)[:, None]
        row = (pos % block_size).to(tl.int64)[:, None]
        dst_row = dst[:, None] * HD
        for c0 in range(0, HD, BLOCK_C):
            cols = c0 + tl.arange(0, BLOCK_C)
            h = (cols // D)[None, :]
            d = (cols % D)[None, :]
            mask = t_ok[:, None] & (cols < HD)[None, :]
            k = tl.load(key_cache_ptr + page * skb + row * skr + h * skh + d * skd, mask=mask)
            v = tl.load(value_cache_ptr + page * svb + row * svr + h * svh + d * svd, mask=mask)
            tl.store(key_ptr + dst_row + cols[None, :], k, mask=mask)
            tl.store(value_ptr + dst_row + cols[None, :], v, mask=mask)


def paged_kv_gather_to_contiguous(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    total_tokens: int,
    max_seqlen: int | None = None,
    *,
    block_t: int | None = None,
    block_c: int | None = None,
    num_warps: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Return the sequences' cached K and V packed contiguously, and their cu_seqlens.

    Args:
        key_cache: (num_blocks, block_size, H, D) bf16/fp16/fp32, any strides.
        value_cache: same shape and dtype as ``key_cache``, any strides.
        block_table: (B, max_blocks) int32/int64 page ids per sequence.
        seq_lens: (B,) int32/int64 cached tokens per sequence (<= max_blocks * block_size).
        total_tokens: sum(seq_lens), the packed token count, known on the host.
        max_seqlen: max(seq_lens) when the caller knows it (sizes the grid); None = total_tokens.
        block_t: Tokens per program (power of two); None = 16.
        block_c: Columns of H * D per chunk (power of two); None = min(next_pow2(H * D), 256).
        num_warps: Warps per program; None = 4.

    Returns:
        (key, value, cu_seqlens): (total_tokens, H, D) each with the cache dtype, and
        (B + 1,) int32 sequence starts.

    Raises:
        ValueError: The shapes or dtypes do not fit, or a count is negative (check_inputs checks
            seq_lens' values against the table, total_tokens and max_seqlen).
    """
    if key_cache.dim() != 4 or value_cache.shape != key_cache.shape:
        raise ValueError(
            f"caches must be (blocks, block_size, H, D) of one shape; got "
            f"{tuple(key_cache.shape)}, {tuple(value_cache.shape)}"
        )
    if value_cache.dtype != key_cache.dtype:
        raise ValueError(f"cache dtypes differ: {key_cache.dtype}, {value_cache.dtype}")
    if block_table.dim() != 2 or block_table.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"block_table must be (B, max_blocks) int32/int64; got {block_table.dtype}"
        )
    b = block_table.shape[0]
    if seq_lens.shape != (b,) or seq_lens.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"seq_lens must be int32/int64 ({b},); got {tuple(seq_lens.shape)}")
    if total_tokens < 0 or (max_seqlen is not None and max_seqlen < 0):
        raise ValueError(f"total_tokens, max_seqlen must be >= 0; got {total_tokens}, {max_seqlen}")
    _, bs, h, d = key_cache.shape
    cu = torch.zeros(b + 1, dtype=torch.int32, device=seq_lens.device)
    lens = seq_lens.contiguous()
    if b > 0:
        _cu_seqlens_kernel[(1,)](lens, cu, b, BLOCK_B=min(triton.next_power_of_2(b), 1024))
    key = torch.empty((total_tokens, h, d), dtype=key_cache.dtype, device=key_cache.device)
    value = torch.empty_like(key)
    longest = total_tokens if max_seqlen is None else min(max_seqlen, total_tokens)
    if longest == 0 or b == 0:
        return key, value, cu
    cfg = {"block_t": 16, "block_c": min(triton.next_power_of_2(h * d), 256), "num_warps": 4}
    given = {"block_t": block_t, "block_c": block_c, "num_warps": num_warps}
    cfg.update({name: val for name, val in given.items() if val is not None})
    table = block_table if block_table.stride(1) == 1 else block_table.contiguous()
    grid = (b, triton.cdiv(longest, cfg["block_t"]))
    _paged_kv_gather_kernel[grid](
        key_cache, value_cache, table, lens, cu, key, value,
        h * d, d, bs, block_table.shape[1] * bs, total_tokens,
        table.stride(0), *key_cache.stride(), *value_cache.stride(),
        BLOCK_T=cfg["block_t"], BLOCK_C=cfg["block_c"],
        num_warps=cfg["num_warps"],
    )  # fmt: skip
    return key, value, cu


def check_inputs(
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    block_size: int,
    total_tokens: int,
    max_seqlen: int | None = None,
) -> None:
    """Raise ValueError unless seq_lens fit their table rows and match the host-side counts.

    Reads seq_lens on the host (a sync), so it stays out of the launcher.
    """
    lens = seq_lens.tolist()
    if any(n < 0 or n > block_table.shape[1] * block_size for n in lens):
        raise ValueError(f"seq_lens {lens} must lie in [0, max_blocks * block_size]")
    if sum(lens) != total_tokens:
        raise ValueError(f"total_tokens {total_tokens} != sum(seq_lens) {sum(lens)}")
    if max_seqlen is not None and max(lens, default=0) > max_seqlen:
        raise ValueError(f"max_seqlen {max_seqlen} < max(seq_lens) {max(lens)}")


def reference(
    key_cache: torch.Tensor,
    value_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    total_tokens: int,
    max_seqlen: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Concatenate each sequence's pages, trimmed to its length, then its cu_seqlens.

    total_tokens and max_seqlen are unused (the lengths come from seq_lens).
    """
    bs = key_cache.shape[1]
    keys, values = [], []
    for row, n in zip(block_table.tolist(), seq_lens.tolist(), strict=True):
        pages = row[: triton.cdiv(n, bs)]
        keys.append(key_cache[pages].flatten(0, 1)[:n])
        values.append(value_cache[pages].flatten(0, 1)[:n])
    cu = torch.zeros(len(keys) + 1, dtype=torch.int32, device=seq_lens.device)
    cu[1:] = torch.cumsum(seq_lens, 0)
    return torch.cat(keys), torch.cat(values), cu


def make_inputs(shape: dict, dtype: torch.dtype, device: str = "cpu") -> dict:
    """Return inputs for ``shape = {"seq_lens": [..], "heads", "head_dim", "block_size"}``.

    Pages are a random permutation of the cache's blocks, so sequences interleave in the cache.
    """
    lens, h, d, bs = (
        shape["seq_lens"],
        shape["heads"],
        shape["head_dim"],
        shape.get("block_size", 8),
    )
    max_blocks = max(triton.cdiv(n, bs) for n in lens) + 1
    num_blocks = len(lens) * max_blocks
    pages = torch.randperm(num_blocks, device=device).reshape(len(lens), max_blocks)
    return {
        "key_cache": torch.randn(num_blocks, bs, h, d, device=device).to(dtype),
        "value_cache": torch.randn(num_blocks, bs, h, d, device=device).to(dtype),
        "block_table": pages.to(torch.int32),
        "seq_lens": torch.tensor(lens, dtype=torch.int32, device=device),
        "total_tokens": sum(lens),
        "max_seqlen": max(lens),
    }
