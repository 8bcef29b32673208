"""The runtime guards and the engagement gate (stages 3-4), each shown failing on the CPU.

Every candidate here is the correct rms_norm example with one trick added, scored by the real
CPU scorer with the static screen skipped (``static_screen=False``), so the runtime evidence alone
must give the verdict. The exploit corpus (tests/exploits) covers the same tricks with the screen
on; these tests pin each guard to its verdict and message.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from aka.bench import EvalResult, Scorer, Verdict
from aka.bench.engagement import judge_engagement
from aka.core import BenchConfig
from aka.spec import ProblemSpec, load_problem
from tests.bench.conftest import REPO, RMS_NORM_RETURN


@pytest.fixture(scope="module")
def runtime_scorer(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    return Scorer(
        BenchConfig(worker_timeout_s=120.0),
        tmp_path_factory.mktemp("guards"),
        device="cpu",
        static_screen=False,
    )


def _variant(base: str, *, header: str = "", body: str = "", ret: str | None = None) -> str:
    """The example with ``header`` at module level, ``body`` at the start of forward and
    ``ret`` replacing its return statement."""
    assert RMS_NORM_RETURN in base
    lines = "".join(f"        {line}\n" for line in body.strip("\n").splitlines())
    tail = (
        RMS_NORM_RETURN
        if ret is None
        else "".join(f"        {line}\n" for line in ret.strip("\n").splitlines())
    )
    return base.replace("\nclass ModelNew", f"\n{header}\n\nclass ModelNew").replace(
        RMS_NORM_RETURN, lines + tail
    )


def _score(scorer: Scorer, problem: ProblemSpec, source: str) -> EvalResult:
    return scorer.evaluate(problem, source, shape_ids=["smoke_t33_h256"])


def test_honest_example_passes_every_guard(
    runtime_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    result = _score(runtime_scorer, rms_norm, rms_norm_candidate)
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert result.fallback_ratio == 0.0
    assert result.engagement is not None
    assert result.engagement.method == "interpreter-bytes"
    assert result.engagement.own_kernels == ["_rms_norm_row_kernel"]
    assert result.shapes[0].fallback_ratio == 0.0


CASES = {
    "lazy_subclass": (
        {
            "header": "class _Lazy(torch.Tensor):\n    pass\n",
            "ret": "return rms_norm(x, weight, self.eps).as_subclass(_Lazy)",
        },
        Verdict.BAD_STRUCTURE,
        "not a plain torch.Tensor",
    ),
    "alias_input": (
        {"ret": "y = rms_norm(x, weight, self.eps)\nx.copy_(y)\nreturn x"},
        Verdict.MUTATED_INPUT,
        "changed",
    ),
    "alias_weight_view": (
        {"ret": "return weight.view(1, -1).expand(x.shape[0], -1)"},
        Verdict.ALIASED_OUTPUT,
        "share memory",
    ),
    "thread": (
        {"body": "import threading\nthreading.Thread(target=lambda: None).start()"},
        Verdict.TAMPERED,
        "started a thread",
    ),
    "timer_patch": (
        {"header": "import time\ntime.perf_counter = lambda: 0.0\n"},
        Verdict.TAMPERED,
        "time.perf_counter",
    ),
    "reference_patch": (
        {
            "header": "import sys\n"
            "sys.modules['_aka_reference'].Model.forward = lambda self, x, w: x\n"
        },
        Verdict.TAMPERED,
        "reference.Model.forward",
    ),
    "data_ptr_cache": (
        {
            "header": "_SEEN = {}\n",
            "ret": "key = x.data_ptr()\nif key not in _SEEN:\n"
            "    _SEEN[key] = rms_norm(x, weight, self.eps)\nreturn _SEEN[key].clone()",
        },
        (Verdict.STALE_OUTPUT, Verdict.WRONG_OUTPUT),
        "",
    ),
    "torch_fallback": (
        {
            "ret": "xf = x.float()\n"
            "y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps) * weight.float()\n"
            "rms_norm(x, weight, self.eps)\nreturn y.to(x.dtype)"
        },
        Verdict.FALLBACK,
        "library work",
    ),
    "decoy_launch": (
        {
            "header": "import numpy as np\n",
            "ret": "dummy = torch.empty(4, 256, dtype=x.dtype)\n"
            "rms_norm(dummy, weight, self.eps)\n"
            "xf = x.float().numpy()\n"
            "y = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + self.eps)\n"
            "return torch.from_numpy(y * weight.float().numpy()).to(x.dtype)",
        },
        Verdict.FALLBACK,
        "library work",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_runtime_guard_gives_its_verdict(
    case: str, runtime_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    edits, expected, snippet = CASES[case]
    result = _score(runtime_scorer, rms_norm, _variant(rms_norm_candidate, **edits))
    allowed = expected if isinstance(expected, tuple) else (expected,)
    assert result.verdict in allowed, (result.verdict, result.failure)
    if result.verdict is not Verdict.ACCEPTED:
        assert result.failure is not None and snippet in result.failure.message
        assert result.score == 0.0


def test_ghost_run_catches_output_written_around_the_kernels(
    runtime_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    # The kernel runs on the real input and output but stores nothing; numpy writes the answer
    # through the output's memory, which no aten op and no launch trace sees: only the ghost does.
    source = rms_norm_candidate.replace(
        "tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)",
        "tl.store(y_ptr + row * stride_y_row + cols, y.to(y_ptr.dtype.element_ty), "
        "mask=mask & (cols < 0))",
    )
    source = _variant(
        source,
        header="import numpy as np\n",
        ret="y = rms_norm(x, weight, self.eps)\n"
        "xs = x.view(torch.int16).numpy().astype(np.int32) << 16\n"
        "xf = xs.view(np.float32)\n"
        "ws = (weight.view(torch.int16).numpy().astype(np.int32) << 16).view(np.float32)\n"
        "v = xf / np.sqrt((xf * xf).mean(-1, keepdims=True) + self.eps) * ws\n"
        "bits = (v.view(np.int32) + 0x8000) >> 16\n"
        "y.view(torch.int16).numpy()[:] = bits.astype(np.int16)\n"
        "return y",
    )
    result = _score(runtime_scorer, rms_norm, source)
    assert result.verdict is Verdict.NOT_ENGAGED, (result.verdict, result.failure)
    assert result.failure is not None and "no-ops" in result.failure.message


def test_engagement_rules_on_recorded_facts() -> None:
    trace = {
        "launches": 1,
        "kernels": ["k"],
        "own_bytes": 900,
        "library_bytes": 100,
        "outputs": ["0"],
        "outputs_covered": ["0"],
        "inputs_covered": ["x"],
    }

    def verdict(facts: dict[str, object], ghost_same: bool | None = False) -> Verdict | None:
        return judge_engagement(facts, None, ghost_same=ghost_same, engagement_min=0.9).verdict

    ok = judge_engagement(trace, None, ghost_same=False, engagement_min=0.9)
    assert ok.verdict is None and ok.fallback_ratio == pytest.approx(0.1)
    assert verdict(trace | {"library_bytes": 101}) is Verdict.FALLBACK
    # On a GPU the profiler's device time decides, not bytes.
    profile = {"own_us": 10.0, "library_us": 90.0, "library_kernels": {"aten::mul": 90.0}}
    gpu = judge_engagement(trace, profile, ghost_same=False, engagement_min=0.5)
    assert gpu.verdict is Verdict.FALLBACK and gpu.method == "profiler"
    assert "aten::mul" in gpu.message
    assert verdict(trace | {"outputs_covered": []}) is Verdict.NOT_ENGAGED
    assert verdict(trace | {"inputs_covered": []}) is Verdict.NOT_ENGAGED
    assert verdict(trace, ghost_same=True) is Verdict.NOT_ENGAGED
    nothing = trace | {"launches": 0, "own_bytes": 0, "library_bytes": 0}
    assert judge_engagement(nothing, None, ghost_same=None, engagement_min=0.9).verdict in (
        Verdict.FALLBACK,
        Verdict.NOT_ENGAGED,
    )


RESIDUAL = Path(__file__).resolve().parents[1] / "fixtures" / "problems" / "residual_add"


@pytest.fixture(scope="module")
def residual_add() -> ProblemSpec:
    return load_problem(RESIDUAL / "op.yaml")


def test_declared_in_place_update_is_checked_against_the_reference_copy(
    cpu_scorer: Scorer, residual_add: ProblemSpec
) -> None:
    honest = (RESIDUAL / "candidate.py").read_text()
    result = cpu_scorer.evaluate(residual_add, honest)
    assert result.verdict is Verdict.ACCEPTED, result.failure
    assert residual_add.in_place == ["residual"]
    # forgetting the in-place update is wrong (the reference's updated residual is compared)
    stale = cpu_scorer.evaluate(residual_add, honest.replace("UPDATE=True", "UPDATE=False"))
    assert stale.verdict is Verdict.WRONG_OUTPUT, stale.failure
    assert stale.failure is not None and "in_place:residual" in stale.failure.message
    # updating an input that is not declared in_place is mutated_input
    wrong = honest.replace(
        "    tl.store(y_ptr + offs, r * 0.5, mask=mask)",
        "    tl.store(y_ptr + offs, r * 0.5, mask=mask)\n    tl.store(x_ptr + offs, r, mask=mask)",
    )
    mutated = cpu_scorer.evaluate(residual_add, wrong)
    assert mutated.verdict is Verdict.MUTATED_INPUT, mutated.failure
    assert mutated.failure is not None and "['x']" in mutated.failure.message


def test_cuda_candidates_are_judged_by_the_profiler_alone() -> None:
    # load_inline launches are invisible to the Triton tracer and the ghost call
    trace = {"launches": 0, "kernels": [], "cuda_kernels": ["rms_kernel"], "own_bytes": 0}
    own = {"own_us": 95.0, "library_us": 5.0, "library_kernels": {}}
    ok = judge_engagement(trace, own, ghost_same=True, engagement_min=0.9)
    assert ok.verdict is None and ok.method == "profiler"
    library = {"own_us": 5.0, "library_us": 95.0, "library_kernels": {"gemv": 95.0}}
    assert judge_engagement(trace, library, ghost_same=True, engagement_min=0.9).verdict is (
        Verdict.FALLBACK
    )


def test_host_clock_cross_check_flags() -> None:
    from aka.bench.performance import host_flags

    floor = {"host_us": [60.0] * 9, "device_us": [10.0] * 9}  # host pays ~50 us of flush + lead
    assert host_flags({"host_us": [75.0] * 9}, floor, device_median_us=20.0) == []
    assert host_flags({"host_us": [10.0] * 9}, floor, device_median_us=20.0) == [
        "host_clock_below_device"
    ]
    assert host_flags({"host_us": [400.0] * 9}, floor, device_median_us=20.0) == ["host_gap"]
    assert host_flags({}, floor, device_median_us=20.0) == []


def test_an_in_place_only_operator_is_engaged(cpu_scorer: Scorer) -> None:
    # Its only output is the input it updates in place (as reshape_and_cache): the ghost probe
    # must compare with the real call's answer, not with the inputs restored for the ghost call.
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "problems" / "cache_write"
    problem = load_problem(fixture / "op.yaml")
    result = cpu_scorer.evaluate(problem, (fixture / "candidate.py").read_text())
    assert result.verdict is Verdict.ACCEPTED, result.failure
    # a kernel that runs but writes each slot back unchanged is still caught
    lazy = (
        (fixture / "candidate.py")
        .read_text()
        .replace("tl.load(x_ptr + row * hidden + offs", "tl.load(cache_ptr + slot * hidden + offs")
    )
    assert "x_ptr + row" not in lazy
    assert cpu_scorer.evaluate(problem, lazy).verdict is Verdict.WRONG_OUTPUT


def test_cuda_kernel_names_are_read_past_launch_bounds_and_templates() -> None:
    from aka.bench.guards import cuda_global_names

    source = """
    template <typename T, int KMAX>
    __global__ void __launch_bounds__(128) step_kernel(const T* x) {}
    __global__ void __launch_bounds__(256, 2) copy_kernel(float* y) {}
    extern "C" __global__ static void plain_kernel ( int n ) {}
    __device__ float helper(float v) { return v; }
    """
    # __launch_bounds__ is a qualifier, not the kernel: taking it for the name made the
    # engagement check count the candidate's own kernel as library work (seen on the H200)
    assert cuda_global_names(source) == {"step_kernel", "copy_kernel", "plain_kernel"}
    for path in (REPO / "reference_kernels" / "cuda").glob("*/*_cuda.py"):
        names = cuda_global_names(path.read_text(encoding="utf-8"))
        assert names and "__launch_bounds__" not in names, path.name


def test_device_events_are_classed_own_glue_readback_or_library() -> None:
    import re

    from aka.bench.guards import device_event_kind

    own = re.compile(r"(?<![\w])(moe_align_kernel)(?![\w])")
    kinds = {
        "void moe_align_kernel<128>(int const*, int*)": "own",
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>": "glue",
        "Memset (Device)": "glue",
        # reading a length back to size the outputs: no device output can come of it
        "Memcpy DtoH (Device -> Pinned)": "readback",
        "Memcpy DtoH (Device -> Pageable)": "readback",
        # a copy onto the device can carry a host-computed answer: library work
        "Memcpy HtoD (Pageable -> Device)": "library",
        "Memcpy DtoD (Device -> Device)": "library",
        "void at::native::reduce_kernel<512, 1>": "library",
    }
    assert {name: device_event_kind(name, own) for name in kinds} == kinds
    assert device_event_kind("moe_align_kernel", None) == "library"  # no own names known


def test_only_a_small_readback_is_set_apart_from_library_work() -> None:
    from aka.bench.engagement import READBACK_FREE_BYTES, READBACK_FREE_US

    trace = {"launches": 1, "kernels": ["k"], "outputs": ["0"], "outputs_covered": ["0"]}
    trace |= {"inputs_covered": ["x"], "own_bytes": 1, "library_bytes": 0}
    # moe_align_block_size_cuda on the H200: its one 4-byte length read was 26-38% of the time
    profile = {"own_us": 6.0, "library_us": 0.0, "readback_us": 3.0, "library_kernels": {}}
    small = trace | {"readback_bytes": 4}
    ok = judge_engagement(small, profile, ghost_same=False, engagement_min=0.9)
    assert ok.verdict is None and ok.fallback_ratio == 0.0
    # an input read back whole lets the host compute unseen, however short the copy
    big = trace | {"readback_bytes": READBACK_FREE_BYTES + 1}
    out = judge_engagement(big, profile, ghost_same=False, engagement_min=0.9)
    assert out.verdict is Verdict.FALLBACK and "copied 1025 bytes" in out.message
    # the CPU interpreter has no device: nothing is read back, the bytes rule decides
    assert judge_engagement(small, None, ghost_same=False, engagement_min=0.9).verdict is None
    # a copy the op trace cannot see (cudaMemcpy in an extension) is bounded by its time
    slow = profile | {"own_us": 1000.0, "readback_us": READBACK_FREE_US + 150.0}
    out = judge_engagement(trace, slow, ghost_same=False, engagement_min=0.9)
    assert out.verdict is Verdict.FALLBACK and "device-to-host copies" in out.message
    assert out.fallback_ratio == pytest.approx(200.0 / 1200.0)


def test_readback_bytes_counts_device_to_host_results_only() -> None:
    import torch

    from aka.bench.guards import readback_bytes

    dev = torch.empty(64, 8, dtype=torch.float16, device="meta")  # any device but the host
    host = torch.empty(64, 8, dtype=torch.float16)
    one = torch.empty((), dtype=torch.int32, device="meta")
    assert readback_bytes("_to_copy", (dev,), {"device": "cpu"}, host) == 64 * 8 * 2
    assert readback_bytes("copy_", (host, dev), {}, host) == 64 * 8 * 2
    assert readback_bytes("_local_scalar_dense", (one,), {}, 7) == 4
    # host to host, device to device and host to device move nothing back
    assert readback_bytes("_to_copy", (host,), {}, host.clone()) == 0
    assert readback_bytes("add", (dev, dev), {}, dev) == 0
    assert readback_bytes("_to_copy", (host,), {"device": "meta"}, dev) == 0
    assert readback_bytes("_local_scalar_dense", (host[0, 0],), {}, 1.0) == 0
