"""fp8_blockscale_fused_moe: a top-k routed SiLU-gated expert FFN on block-scaled fp8 operands.

Inputs: ``hidden_states`` (T, H) is N(0, 1) * 0.03 quantised to fp8 per token and group of 128
columns, with ``a_scale`` (T, ceil(H/128)) fp32; ``w1`` (E, 2I, H) and ``w2`` (E, H, I) are bf16
N(0, 1) draws quantised to fp8 per 128 x 128 block of each expert's matrix, with ``fc1_scale`` (E,
ceil(2I/128), ceil(H/128)) and ``fc2_scale`` (E, ceil(H/128), ceil(I/128)) fp32 (this scale layout,
one grid per expert, is a choice made here: the paraphrase of upstream names no layout). Every
scale is max(absmax / 448, 1e-10) and the fp8 value clamp(x / scale, -448, 448): fp8 is NVIDIA's
float8_e4m3fn (max 448) where the original benchmark used AMD's float8_e4m3fnuz (max 240).
``topk_ids`` (T, k) int32 are the k largest of uniform random logits over the E experts (so the k
experts of a token are distinct); ``topk_weights`` (T, k) fp32 a softmax of N(0, 1) logits.
metadata.json lists ``hidden_states`` as bf16, but upstream passes the fp8 activations (with
``a_scale``); so does this reference, so that a candidate written for upstream runs unchanged.
Semantics: dequantise (fp8 upcast to fp32 times its block's scale), then for each token out[t] =
sum_j topk_weights[t, j] * (SiLU(x_t w1g^T) * (x_t w1u^T)) w2^T with expert topk_ids[t, j], where
the first I rows of w1 are the gate and the last I the up projection; all in fp32, the intermediate
activation is not re-quantised. Serving kernels (vLLM, SGLang) do re-quantise it to fp8 per token
and group of 128 columns before the down GEMM; that errs by a relative L2 of about 2.3e-2 and up to
0.11 x the output's RMS per element (emulated at two shapes), so the tolerance (``TOLERANCE``)
accepts it: atol = 0.25 x RMS, rtol = 5e-2 (also the whole-output relative L2 bound), where bf16's
table (1e-2) would reject the production algorithm. Output: ``out`` (T, H) bf16 as metadata.json
says; upstream cast it to the activations' dtype, fp8 in practice, which would be an unscaled fp8
output: bf16 is kept instead. Outputs are O(10) (unscaled N(0, 1) weights), far above bf16's atol,
so an all-zero or constant output cannot pass. Phase rule: at most 64 tokens -> "decode" (one new
token per sequence), more -> "prefill".
"""

import torch
import torch.nn.functional as F

OP_FAMILY = "moe"
FP8 = torch.float8_e4m3fn
FP8_MAX = torch.finfo(FP8).max  # 448 on NVIDIA's e4m3fn (AMD's e4m3fnuz: 240)
SCALE_MIN = 1e-10
BLOCK = 128  # quantisation block: 1 x 128 for activations, 128 x 128 for weights
#: Accepts the serving kernels' fp8 re-quantisation of the activation (see the module doc).
TOLERANCE = {
    "atol": 0.25,
    "rtol": 5e-2,
    "atol_scale": "rms",
    "reason": "serving kernels re-quantise the SiLU activation to fp8 per 1 x 128 group before "
    "the down GEMM: relative L2 2.3e-2, elementwise up to 0.11 x RMS (emulated); bf16's 1e-2 "
    "would reject the production algorithm",
}
#: At most this many tokens is a decode step (one new token per sequence).
DECODE_MAX_TOKENS = 64

SMOKE = [
    {
        "id": "smoke_9tok_6exp_top3_tails",
        "init_kwargs": {"num_experts": 6, "intermediate_size": 192, "top_k": 3},
        "input_kwargs": {
            "token_count": 9,
            "hidden_size": 200,
            "intermediate_size": 192,
            "num_experts": 6,
            "top_k": 3,
        },
    },
    {
        "id": "smoke_1tok_8exp_top4",
        "init_kwargs": {"num_experts": 8, "intermediate_size": 64, "top_k": 4},
        "input_kwargs": {
            "token_count": 1,
            "hidden_size": 256,
            "intermediate_size": 64,
            "num_experts": 8,
            "top_k": 4,
        },
    },
]


def phase_of(token_count: int = 1, **_: object) -> str:
    """At most 64 tokens -> "decode" (one new token per sequence), more -> "prefill"."""
    return "decode" if token_count <= DECODE_MAX_TOKENS else "prefill"


def _dequantize(q: torch.Tensor, scales: torch.Tensor, block_rows: int, block_cols: int):
    """fp8 (R, C) times its (ceil(R/br), ceil(C/bc)) block scales, in fp32."""
    rows, cols = q.shape
    full = scales.float().repeat_interleave(block_rows, dim=0)[:rows]
    return q.float() * full.repeat_interleave(block_cols, dim=1)[:, :cols]


class Model(torch.nn.Module):
    """Dequantise, then routed SiLU-gated expert FFNs in fp32, one expert at a time."""

    def __init__(self, num_experts: int = 128, intermediate_size: int = 768, top_k: int = 8):
        super().__init__()
        self.num_experts = num_experts
        self.intermediate_size = intermediate_size
        self.top_k = top_k

    def forward(
        self,
        hidden_states: torch.Tensor,
        w1: torch.Tensor,
        w2: torch.Tensor,
        topk_weights: torch.Tensor,
        topk_ids: torch.Tensor,
        a_scale: torch.Tensor,
        fc1_scale: torch.Tensor,
        fc2_scale: torch.Tensor,
    ) -> torch.Tensor:
        tokens, top_k = topk_ids.shape
        inter = w2.shape[2]
        x = _dequantize(hidden_states, a_scale, 1, BLOCK)
        out = torch.zeros_like(x)
        # Group the (token, slot) pairs by expert; stable, so tokens keep their order.
        flat_ids = topk_ids.reshape(-1).long()
        flat_weights = topk_weights.reshape(-1).float()
        token_of = torch.arange(tokens, device=x.device).repeat_interleave(top_k)
        order = torch.argsort(flat_ids, stable=True)
        counts = torch.bincount(flat_ids, minlength=w1.shape[0]).tolist()
        start = 0
        for expert, count in enumerate(counts):
            if count == 0:
                continue
            pairs = order[start : start + count]
            start += count
            rows = token_of[pairs]
            # Dequantise one expert at a time: the whole fp32 weight set would not fit.
            gate_up = x[rows] @ _dequantize(w1[expert], fc1_scale[expert], BLOCK, BLOCK).t()
            act = F.silu(gate_up[:, :inter]) * gate_up[:, inter:]
            down = act @ _dequantize(w2[expert], fc2_scale[expert], BLOCK, BLOCK).t()
            out.index_add_(0, rows, down * flat_weights[pairs, None])
        return out.to(torch.bfloat16)


def _quantize_blocks(x: torch.Tensor, block_rows: int, block_cols: int):
    """fp32 (R, C) -> fp8 (R, C) and fp32 scales (ceil(R/br), ceil(C/bc)), absmax per block."""
    rows, cols = x.shape
    n_r, n_c = -(-rows // block_rows), -(-cols // block_cols)
    padded = F.pad(x, (0, n_c * block_cols - cols, 0, n_r * block_rows - rows))
    blocks = padded.view(n_r, block_rows, n_c, block_cols)
    scales = (blocks.abs().amax(dim=(1, 3)) / FP8_MAX).clamp(min=SCALE_MIN)
    q = (blocks / scales[:, None, :, None]).clamp(-FP8_MAX, FP8_MAX)
    q = q.view(n_r * block_rows, n_c * block_cols)[:rows, :cols].to(FP8)
    return q, scales


def _quantized_experts(experts: int, rows: int, cols: int, device: str):
    """Per expert: a bf16 N(0, 1) (rows, cols) matrix quantised per 128 x 128 block."""
    q = torch.empty(experts, rows, cols, dtype=FP8, device=device)
    scales = torch.empty(experts, -(-rows // BLOCK), -(-cols // BLOCK), device=device)
    for e in range(experts):  # one expert at a time keeps the fp32 temporaries small
        w = torch.randn(rows, cols, device=device).to(torch.bfloat16).float()
        q[e], scales[e] = _quantize_blocks(w, BLOCK, BLOCK)
    return q, scales


def _make_inputs(
    token_count: int,
    hidden_size: int,
    intermediate_size: int,
    num_experts: int,
    top_k: int,
    device: str = "cuda",
) -> dict[str, torch.Tensor]:
    """Draw and quantise activations and weights, and a routing of distinct experts per token."""
    t, h, i, e = token_count, hidden_size, intermediate_size, num_experts
    hidden = (torch.randn(t, h, device=device) * 0.03).to(torch.bfloat16).float()
    hidden_q, a_scale = _quantize_blocks(hidden, 1, BLOCK)
    w1, fc1_scale = _quantized_experts(e, 2 * i, h, device)
    w2, fc2_scale = _quantized_experts(e, h, i, device)
    topk_ids = torch.rand(t, e, device=device).topk(top_k, dim=-1).indices.to(torch.int32)
    topk_weights = torch.softmax(torch.randn(t, top_k, device=device), dim=-1)
    return {
        "hidden_states": hidden_q,
        "w1": w1,
        "w2": w2,
        "topk_weights": topk_weights,
        "topk_ids": topk_ids,
        "a_scale": a_scale,
        "fc1_scale": fc1_scale,
        "fc2_scale": fc2_scale,
    }
