"""Profile data: compiler facts from Triton's caches, the ncu CSV, and the CPU path."""

from __future__ import annotations

import types
from collections import namedtuple
from typing import Any

import pytest

from aka.bench import ProfileData, Scorer
from aka.bench.profile import NCU_METRICS, kernel_facts, ncu_command, parse_ncu_csv
from aka.spec import ProblemSpec

Meta = namedtuple("Meta", "name shared num_warps num_stages")


class _Compiled:
    """Stands in for triton's CompiledKernel after its first launch."""

    def __init__(self, name: str, regs: int, spills: int, shared: int, warps: int) -> None:
        self.name = name
        self.n_regs, self.n_spills = regs, spills
        self.metadata = Meta(name, shared, warps, 3)


def _jit(layout: str, *kernels: _Compiled) -> Any:
    """A real ``JITFunction`` object with its cache filled the way a triton version fills it."""
    from triton.runtime.jit import JITFunction  # lazily: tests/conftest.py explains why

    fn = JITFunction.__new__(JITFunction)
    cache = {f"key{i}": k for i, k in enumerate(kernels)}
    if layout == "3.6":  # (kernel_cache, target, backend, binder)
        fn.device_caches = {0: (cache, None, None, None)}
    elif layout == "3.7":  # (kernel_cache, kernel_key_cache, target, backend, binder)
        fn.device_caches = {0: (cache, {}, None, None, None)}
    else:  # older: cache[device][key]
        fn.cache = {0: cache}
    return fn


@pytest.mark.parametrize("layout", ["3.6", "3.7", "legacy"])
def test_kernel_facts_reads_each_triton_cache_layout(layout: str) -> None:
    module = types.ModuleType("candidate")
    module.kernel = _jit(layout, _Compiled("_row_kernel", 40, 0, 1024, 8))  # type: ignore[attr-defined]

    facts = kernel_facts(module)

    assert facts == [
        {
            "name": "_row_kernel",
            "n_regs": 40,
            "n_spills": 0,
            "shared_bytes": 1024,
            "num_warps": 8,
            "num_stages": 3,
        }
    ]


def test_kernel_facts_unwraps_autotune_and_skips_the_rest() -> None:
    inner = _jit("3.7", _Compiled("_mm", 168, 4, 65536, 4), _Compiled("_mm", 128, 0, 32768, 4))
    autotuned = types.SimpleNamespace(
        fn=types.SimpleNamespace(fn=inner)
    )  # autotune(heuristics(jit))
    module = types.ModuleType("candidate")
    module.__dict__.update({"tuned": autotuned, "alias": inner, "x": 3, "torch": types})
    bare = types.SimpleNamespace(n_regs=None)  # a compiled kernel never launched has no n_regs
    module.__dict__["lazy"] = _jit("3.6", bare)  # type: ignore[arg-type]

    facts = kernel_facts(module)

    assert sorted((f["name"], f["n_regs"], f["n_spills"]) for f in facts) == [
        ("_mm", 128, 0),
        ("_mm", 168, 4),
        ("kernel", None, None),  # falls back to the function's name; unknown facts stay None
    ]


_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
_COLUMNS = {  # metric: (unit, first launch, second launch)
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "71.20", "83.40"),
    "gpu__time_duration.sum": ("usecond", "1,012.50", "12.25"),
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": ("%", "22.1", "25.0"),
    "sm__warps_active.avg.pct_of_peak_sustained_active": ("%", "64.3", "70.0"),
    _STALL.format("long_scoreboard"): ("", "9.50", "12.00"),
    _STALL.format("selected"): ("", "1.00", "1.00"),
    _STALL.format("barrier"): ("", "0.40", "0.50"),
    _STALL.format("wait"): ("", "0.80", "0.90"),
    _STALL.format("math_pipe_throttle"): ("", "0.10", "0.20"),
}
_IDS = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream"]


def _csv_line(cells: list[str]) -> str:
    return ",".join(f'"{c}"' for c in cells)


def _launch(i: int) -> str:
    ids = [str(i), "4242", "python3.12", "127.0.0.1", "_rms_norm_row_kernel", "1", "7"]
    return _csv_line(ids + [v[1 + i] for v in _COLUMNS.values()])


RAW_CSV = "\n".join(
    [
        "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
        '==PROF== Profiling "_rms_norm_row_kernel": 0%....50%....100% - 9 passes',
        _csv_line(_IDS + list(_COLUMNS)),
        _csv_line([""] * len(_IDS) + [v[0] for v in _COLUMNS.values()]),
        _launch(0),
        _launch(1),
        "==PROF== Disconnected from process 4242",
    ]
)


def test_parse_ncu_csv_keeps_the_last_launch_and_top_stalls() -> None:
    (m,) = parse_ncu_csv(RAW_CSV)

    assert m.name == "_rms_norm_row_kernel"
    assert m.dram_throughput_pct == pytest.approx(83.4)
    assert m.duration_us == pytest.approx(12.25)  # usecond, as the units row says
    assert m.sm_throughput_pct == pytest.approx(25.0)
    assert m.achieved_occupancy_pct == pytest.approx(70.0)
    assert list(m.stalls) == ["long_scoreboard", "wait", "barrier"]  # 'selected' is no stall


def test_parse_ncu_csv_converts_nanoseconds_and_handles_no_table() -> None:
    text = RAW_CSV.replace('"usecond"', '"nsecond"')

    assert parse_ncu_csv(text)[0].duration_us == pytest.approx(0.01225)
    assert parse_ncu_csv("==ERROR== ERR_NVGPUCTRPERM - no permission\n") == []


def test_ncu_command_profiles_only_the_named_kernels() -> None:
    cmd = ncu_command("/usr/bin/ncu", ["_a_kernel", "_b.kernel"])

    assert cmd[0] == "/usr/bin/ncu"
    joined = " ".join(cmd)
    for flag in ("--clock-control none", "--target-processes all", "--csv", "--page raw"):
        assert flag in joined
    assert cmd[cmd.index("--kernel-name") + 1] == r"regex:(_a_kernel|_b\.kernel)"
    assert cmd[cmd.index("--metrics") + 1].split(",") == list(NCU_METRICS)


def test_profile_on_cpu_returns_empty_with_a_note(
    cpu_scorer: Scorer, rms_norm: ProblemSpec, rms_norm_candidate: str
) -> None:
    data = cpu_scorer.profile(rms_norm, rms_norm_candidate)

    assert isinstance(data, ProfileData)
    assert data.mode == "cpu_interpreter" and data.kernels == [] and data.ncu == []
    assert data.shape_id is not None and data.shape_id.startswith("smoke")
    assert any("no compiled kernel" in n for n in data.notes)
