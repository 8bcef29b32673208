"""linear_sigmoid_mul via torch.nn.functional.linear in bf16 (cuBLAS with a fused bias epilogue).

The library baseline: F.linear on the bf16 operands (fp32 accumulation on the tensor cores, the
bias added in the epilogue, the logits rounded to bf16), then torch.sigmoid and the product with
post_mul_mat in bf16, instead of the reference's fp32 GEMM on upcast copies. The extra roundings
(logits, sigmoid, product) stay within a few bf16 ulps of the output, and the sigmoid damps the
logits' rounding (its slope is at most 1/4), so the result is well inside bf16's tolerance.
"""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    """bf16 linear + bias, sigmoid, times post_mul_mat."""

    def forward(
        self,
        hidden_states: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        post_mul_mat: torch.Tensor,
    ) -> torch.Tensor:
        return torch.sigmoid(F.linear(hidden_states, weight, bias)) * post_mul_mat
