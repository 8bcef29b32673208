"""Stage 4 and the runtime guards on a real GPU (run with -m gpu): the profiler's evidence."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from aka.bench import Scorer, Verdict
from aka.core import BenchConfig
from aka.spec import ProblemSpec

pytestmark = [pytest.mark.gpu, pytest.mark.integration]
SHAPE = ["prefill_t4096_h4096"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def scorers(tmp_path_factory: pytest.TempPathFactory) -> tuple[Scorer, Scorer]:
    config = BenchConfig(
        min_samples=30, max_samples=200, sample_budget_s=0.3, torch_compile_baseline=False
    )
    cache = tmp_path_factory.mktemp("gpu-guards")
    return (
        Scorer(config, cache, device="cuda"),
        Scorer(config, cache, device="cuda", static_screen=False),
    )


def test_gpu_honest_kernel_owns_its_device_time(
    scorers: tuple[Scorer, Scorer], rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    result = scorers[0].evaluate(rms_norm, rms_norm_candidate, shape_ids=SHAPE, cold_recheck=True)
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert result.engagement is not None and result.engagement.method == "profiler"
    assert result.engagement.own_kernels == ["_rms_norm_row_kernel"]
    assert result.fallback_ratio is not None and result.fallback_ratio < 0.1
    sandbox = result.manifest.sandbox
    assert sandbox.get("persisting_l2_reset") is True, sandbox.get("persisting_l2_calls")
    assert not {"host_gap", "host_clock_below_device"} & set(result.shapes[0].flags)
    assert any(n.startswith("cold re-check") and "reproduced" in n for n in result.notes)


def test_gpu_pytorch_fallback_is_measured_by_the_profiler(
    scorers: tuple[Scorer, Scorer], rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    source = inject(
        "xf = x.float()\n"
        "y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * weight.float()\n"
        "rms_norm(x, weight, self.eps)\n"
        "return y.to(x.dtype)"
    )
    result = scorers[1].evaluate(rms_norm, source, shape_ids=SHAPE)
    assert result.verdict is Verdict.FALLBACK, result.failure
    assert result.engagement is not None and result.engagement.method == "profiler"
    assert result.fallback_ratio is not None and result.fallback_ratio > 0.5
    assert result.engagement.library  # the aten kernels that did the work, by name


def test_gpu_ghost_run_sees_a_kernel_that_does_nothing(
    scorers: tuple[Scorer, Scorer], rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    # the kernel runs on the real tensors but stores nothing; a host round trip computes y
    source = rms_norm_candidate.replace(
        "mask=mask)\n\n\ndef _launch_config", "mask=mask & (cols < 0))\n\n\ndef _launch_config"
    ).replace(
        "        return rms_norm(x, weight, self.eps)\n",
        "        y = rms_norm(x, weight, self.eps)\n"
        "        xf = x.cpu().float()\n"
        "        inv = (xf.pow(2).mean(-1, keepdim=True) + self.eps).rsqrt()\n"
        "        ref = xf * inv * weight.cpu().float()\n"
        "        y.copy_(ref.to(y.dtype))\n"
        "        return y\n",
    )
    result = scorers[1].evaluate(rms_norm, source, shape_ids=SHAPE)
    assert result.verdict in (Verdict.FALLBACK, Verdict.NOT_ENGAGED), result.failure


def test_gpu_a_length_read_back_is_set_apart_but_an_input_read_back_is_fallback(
    scorers: tuple[Scorer, Scorer], rms_norm: ProblemSpec, inject: Callable[[str], str]
) -> None:
    decode = ["decode_b64_h4096"]  # a ~3 us kernel: a 4-byte read is a large share of its time
    length = inject("rows = x.new_full((1,), x.shape[0], dtype=torch.int32).item()\nassert rows")
    result = scorers[1].evaluate(rms_norm, length, shape_ids=decode)
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert result.fallback_ratio is not None and result.fallback_ratio < 0.1
    # the host computes each row's scale from a full copy of x; only own kernels run on the device
    cheat = (REPO / "tests" / "exploits" / "cheats" / "host_readback_reduction.py").read_text()
    result = scorers[1].evaluate(rms_norm, cheat, shape_ids=decode)
    assert result.verdict is Verdict.FALLBACK, result.failure
    assert result.failure is not None and "copied 524288 bytes" in result.failure.message
