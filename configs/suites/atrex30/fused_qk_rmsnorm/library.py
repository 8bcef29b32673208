"""fused_qk_rmsnorm via torch.nn.functional.rms_norm per head (fused RMSNorm on the GPU).

The library baseline: the q and k slices of the packed rows are viewed as (T, heads, d) and each
normalised by one F.rms_norm call without a weight (fp32 math, rounded to fp16 once), then
multiplied by their fp16 weight, which is the reference's order of roundings exactly (a fused
weight would round once where the reference rounds twice, up to ~1.5 fp16 ulps apart, too close
to fp16's tolerance); v is copied. One concatenation assembles the output.
"""

import torch
import torch.nn.functional as F

_EPS = 1e-6


class Model(torch.nn.Module):
    """Per-head q/k RMSNorm by F.rms_norm (the weights are inputs)."""

    def __init__(self, head_num=32, kv_head_num=8, size_per_head=128):
        super().__init__()
        self.head_num = head_num
        self.kv_head_num = kv_head_num
        self.size_per_head = size_per_head

    def forward(self, hidden_states, q_weight, k_weight):
        """Normalise the q and k heads, pass v through."""
        tokens, d = hidden_states.shape[0], self.size_per_head
        q_end = self.head_num * d
        k_end = q_end + self.kv_head_num * d
        q = hidden_states[:, :q_end].view(tokens, self.head_num, d)
        k = hidden_states[:, q_end:k_end].view(tokens, self.kv_head_num, d)
        q = F.rms_norm(q, (d,), None, _EPS) * q_weight
        k = F.rms_norm(k, (d,), None, _EPS) * k_weight
        return torch.cat([q.flatten(1), k.flatten(1), hidden_states[:, k_end:]], dim=1)
