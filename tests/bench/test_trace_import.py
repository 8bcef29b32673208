"""``aka trace import``: real profiler traces of small PyTorch programs become loadable suites.

The CPU traces are recorded here with torch.profiler (no GPU kernels: time is CPU self time,
attributed to the outermost mapped op); the expected times come from the same profiler run's own
``key_averages``. The ``gpu`` test does the same with CUDA kernels on the GPU machine.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from aka.bench.trace import OpCall, read_trace
from aka.bench.trace_map import OP_MAP, PHASE_RULES, map_call
from aka.bench.trace_suite import import_trace
from aka.cli import main
from aka.core import SpecError
from aka.spec import load_suite, parse_op_yaml_text

torch = pytest.importorskip("torch")
F = torch.nn.functional

HIDDEN, TOKENS, DECODE_TOKENS = 256, 96, 8
REPEATS = 3
MAPPED_OUTER = ("aten::rms_norm", "aten::layer_norm", "aten::scaled_dot_product_attention")


def _tiny_program(x: Any, x_small: Any, w: Any, b: Any, q: Any) -> None:
    """rms_norm at two shapes, layer_norm, SDPA (plain and causal), a gated SiLU and a cumsum."""
    h = F.rms_norm(x, (HIDDEN,), w, 1e-6)
    F.rms_norm(x_small, (HIDDEN,), w, 1e-6)
    F.layer_norm(h, (HIDDEN,), w, b, 1e-5)
    F.scaled_dot_product_attention(q, q, q)
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    d = HIDDEN // 2
    F.silu(h[..., :d]) * h[..., d:]
    torch.cumsum(h.float(), dim=0)


@pytest.fixture(scope="module")
def cpu_profile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Profile the tiny program on the CPU; export a Chrome trace and key_averages JSON."""
    from torch.profiler import ProfilerActivity, profile

    from aka.bench.trace import dump_key_averages

    torch.manual_seed(0)
    bf16 = torch.bfloat16
    x = torch.randn(TOKENS, HIDDEN, dtype=bf16)
    x_small = torch.randn(DECODE_TOKENS, HIDDEN, dtype=bf16)
    w, b = torch.randn(HIDDEN, dtype=bf16), torch.randn(HIDDEN, dtype=bf16)
    q = torch.randn(2, 4, 48, 32, dtype=bf16)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(REPEATS):
            _tiny_program(x, x_small, w, b, q)
    folder = tmp_path_factory.mktemp("profile")
    chrome = folder / "trace.json"
    prof.export_chrome_trace(str(chrome))
    averages = dump_key_averages(prof, folder / "key_averages.json")
    rows = {
        (a.key, json.dumps(a.input_shapes)): (a.cpu_time_total, a.self_cpu_time_total)
        for a in prof.key_averages(group_by_input_shape=True)
    }
    return {"chrome": chrome, "averages": averages, "rows": rows}


def _inclusive_us(rows: dict[tuple[str, str], tuple[float, float]], key: str) -> dict[str, float]:
    """The profiler's own inclusive CPU time of ``key`` per input-shape signature."""
    return {shapes: total for (k, shapes), (total, _) in rows.items() if k == key}


# --- reading: grouping and attribution ----------------------------------------------------------


def test_chrome_trace_groups_calls_by_op_and_shape(cpu_profile: dict[str, Any]) -> None:
    profile = read_trace(cpu_profile["chrome"], OP_MAP.keys())

    assert (profile.format, profile.basis) == ("chrome_trace", "cpu_self")
    rms = [w for w in profile.work if w.call.name == "aten::rms_norm"]
    assert sorted(w.call.dims(0) for w in rms) == [[DECODE_TOKENS, HIDDEN], [TOKENS, HIDDEN]]
    assert all(w.calls == REPEATS and w.call.dtype(0) == "bf16" for w in rms)
    assert math.isclose(sum(w.time_us for w in profile.work), profile.total_us, rel_tol=1e-9)
    # The mapped op owns its children: no inner op of rms_norm or SDPA is a group of its own.
    names = {w.call.name for w in profile.work}
    assert not names & {
        "aten::_fused_rms_norm",
        "aten::_scaled_dot_product_flash_attention_for_cpu",
    }


def test_chrome_trace_time_is_the_outermost_ops_inclusive_time(
    cpu_profile: dict[str, Any],
) -> None:
    profile = read_trace(cpu_profile["chrome"], OP_MAP.keys())

    for key in (*MAPPED_OUTER, "aten::cumsum"):
        measured = _inclusive_us(cpu_profile["rows"], key)
        grouped: dict[str, float] = {}
        for w in profile.work:
            if w.call.name == key:
                shapes = json.dumps(list(w.call.input_dims))
                grouped[shapes] = grouped.get(shapes, 0.0) + w.time_us
        assert grouped.keys() == measured.keys(), key
        for shapes, total in measured.items():
            assert grouped[shapes] == pytest.approx(total, rel=1e-3), (key, shapes)


def test_gpu_kernels_go_to_the_outermost_mapped_op_that_launched_them(
    cpu_profile: dict[str, Any], tmp_path: Path
) -> None:
    # Kernels added to the real trace the way Kineto writes them: a cudaLaunchKernel inside the
    # inner op (aten::_fused_rms_norm) carrying a correlation id that the kernel repeats; one kernel
    # linked only by External id; one whose launch is not in the trace.
    trace = json.loads(cpu_profile["chrome"].read_text())
    events = trace["traceEvents"]
    expected: dict[str, float] = {"aten::rms_norm": 0.0, "aten::scaled_dot_product_attention": 0.0}
    inner = [e for e in events if e.get("name") == "aten::_fused_rms_norm"]
    for corr, op in enumerate(inner, start=1000):
        launch_ts = op["ts"] + op["dur"] / 2
        events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": op["pid"],
             "tid": op["tid"], "ts": launch_ts, "dur": 1.0, "args": {"correlation": corr}}
        )  # fmt: skip
        events.append(
            {"ph": "X", "cat": "kernel", "name": "rms_kernel", "pid": 0, "tid": 7,
             "ts": launch_ts + 5, "dur": 10.0 + corr % 7, "args": {"correlation": corr}}
        )  # fmt: skip
        expected["aten::rms_norm"] += 10.0 + corr % 7
    flash = next(e for e in events if e.get("name", "").endswith("flash_attention_for_cpu"))
    events.append(
        {"ph": "X", "cat": "kernel", "name": "attn_kernel", "pid": 0, "tid": 7, "ts": 1.0,
         "dur": 42.0, "args": {"External id": flash["args"]["External id"]}}
    )  # fmt: skip
    expected["aten::scaled_dot_product_attention"] += 42.0
    events.append(
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 2.0,
         "dur": 3.0, "args": {"correlation": 99999}}
    )  # fmt: skip
    path = tmp_path / "gpu_trace.json"
    path.write_text(json.dumps(trace))

    profile = read_trace(path, OP_MAP.keys())

    assert profile.basis == "gpu"
    by_name: dict[str, float] = {}
    for w in profile.work:
        by_name[w.call.name] = by_name.get(w.call.name, 0.0) + w.time_us
    assert by_name == pytest.approx(
        {**expected, "[gpu_memcpy outside any cpu op] Memcpy HtoD": 3.0}
    )
    assert sum(w.calls for w in profile.work if w.call.name == "aten::rms_norm") == len(inner)


def test_key_averages_rows_keep_their_self_time(cpu_profile: dict[str, Any]) -> None:
    profile = read_trace(cpu_profile["averages"], OP_MAP.keys())

    assert (profile.format, profile.basis) == ("key_averages", "cpu_self")
    for w in profile.work:
        total, self_us = cpu_profile["rows"][(w.call.name, json.dumps(list(w.call.input_dims)))]
        assert w.time_us == pytest.approx(self_us, rel=1e-6)
        assert w.calls >= REPEATS
    rms = next(w for w in profile.work if w.call.name == "aten::rms_norm")
    assert rms.call.dtype(0) == "bf16" and rms.call.value(3) == pytest.approx(1e-6)


# --- importing: the written suite ---------------------------------------------------------------


def test_import_writes_a_suite_that_loads_with_weights_from_measured_time(
    cpu_profile: dict[str, Any], tmp_path: Path
) -> None:
    result = import_trace(cpu_profile["chrome"], tmp_path / "suite")
    suite = load_suite(tmp_path / "suite")

    names = {op.name for op in suite.operators}
    assert names == {"rms_norm", "layer_norm", "attention_forward", "unified_attention"}
    for op in suite.operators:
        problem = suite.problem(op.name)
        tune = [s for s in problem.shapes if s.split.value == "tune"]
        assert op.tune_shapes == len(tune) and op.smoke_shapes >= 1
        assert sum(s.weight for s in tune) == pytest.approx(1.0, abs=1e-5)
    assert sum(op.weight for op in suite.operators) == pytest.approx(1.0, abs=1e-5)
    # Weights follow the profiler's own inclusive times of the outermost ops.
    rows = cpu_profile["rows"]
    measured = {
        "rms_norm": sum(_inclusive_us(rows, "aten::rms_norm").values()),
        "layer_norm": sum(_inclusive_us(rows, "aten::layer_norm").values()),
    }
    weights = {op.name: op.weight for op in suite.operators}
    ratio = measured["rms_norm"] / measured["layer_norm"]
    assert weights["rms_norm"] / weights["layer_norm"] == pytest.approx(ratio, rel=1e-3)
    sdpa = sum(_inclusive_us(rows, "aten::scaled_dot_product_attention").values())
    both = weights["attention_forward"] + weights["unified_attention"]
    assert both / weights["rms_norm"] == pytest.approx(sdpa / measured["rms_norm"], rel=1e-3)
    # rms_norm ran at a prefill and a decode shape.
    rms = suite.problem("rms_norm").shapes_in()
    phases = {s.input_kwargs["token_count"]: s.phase.value for s in rms if s.split.value == "tune"}
    assert phases == {TOKENS: "prefill", DECODE_TOKENS: "decode"}
    # What is not covered is listed with its share; everything adds up to the whole profile.
    uncovered = {u.name: u for u in suite.uncovered}
    assert {"aten::cumsum", "aten::silu"} <= uncovered.keys()
    assert "no atrex30 problem" in uncovered["aten::cumsum"].reason
    total_share = result.covered_share + sum(u.share for u in result.uncovered)
    assert total_share == pytest.approx(1.0, abs=1e-4)
    assert suite.source["sha256"] and suite.source["time_basis"] == "cpu_self"


def test_import_keeps_the_top_n_heaviest_shapes(
    cpu_profile: dict[str, Any], tmp_path: Path
) -> None:
    result = import_trace(cpu_profile["chrome"], tmp_path / "suite", top=1)

    rms = next(op for op in result.operators if op.name == "rms_norm")
    assert (rms.shapes, rms.shapes_dropped) == (1, 1)
    measured = _inclusive_us(cpu_profile["rows"], "aten::rms_norm")
    heaviest = json.loads(max(measured, key=lambda shapes: measured[shapes]))[0][0]
    kept = load_suite(tmp_path / "suite").problem("rms_norm").shapes_in()[0]
    assert kept.input_kwargs["token_count"] == heaviest


def test_import_of_key_averages_writes_a_loadable_suite(
    cpu_profile: dict[str, Any], tmp_path: Path
) -> None:
    result = import_trace(cpu_profile["averages"], tmp_path / "suite")
    suite = load_suite(tmp_path / "suite")

    assert result.format == "key_averages"
    assert "rms_norm" in {op.name for op in suite.operators}
    for op in suite.operators:
        suite.problem(op.name)


def test_import_refuses_a_non_empty_directory_unless_forced(
    cpu_profile: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "notes.txt").write_text("mine")

    with pytest.raises(SpecError, match="not empty"):
        import_trace(cpu_profile["chrome"], tmp_path)
    import_trace(cpu_profile["chrome"], tmp_path, force=True)

    assert (tmp_path / "notes.txt").read_text() == "mine"
    assert load_suite(tmp_path).operators


@pytest.mark.integration
def test_cli_prints_tables_and_json(
    cpu_profile: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "suite"
    code = main(["trace", "import", str(cpu_profile["chrome"]), "--out", str(out)])
    text = capsys.readouterr().out
    assert code == 0
    assert "rms_norm" in text and "not covered" in text and "aten::cumsum" in text

    code = main(["trace", "import", str(cpu_profile["chrome"]), "--out", str(out)])
    assert code == 2
    assert "not empty" in capsys.readouterr().err

    args = ["trace", "import", str(cpu_profile["averages"]), "-o", str(out), "--force", "--json"]
    code = main(args)
    summary = json.loads(capsys.readouterr().out)
    assert code == 0
    assert summary["format"] == "key_averages"
    assert {op["name"] for op in summary["operators"]} >= {"rms_norm"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("this is not json", "not JSON"),
        ('{"displayTimeUnit": "ms"}', "not a profile"),
        ("[1, 2, 3]", "not a profile"),
        ('{"traceEvents": []}', "no operator events"),
        ('{"rows": [{"key": "aten::mm", "count": -1}]}', "key_averages row 0"),
    ],
)
def test_bad_files_give_a_spec_error_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)

    with pytest.raises(SpecError, match=message) as info:
        read_trace(bad)
    assert info.value.file == str(bad)
    assert main(["trace", "import", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "bad.json" in capsys.readouterr().err


# --- the mapping table --------------------------------------------------------------------------

BF, FP32, FP8, I32, I64 = "c10::BFloat16", "float", "c10::Float8_e4m3fn", "int", "long int"
_Q = [2, 4, 64, 32]  # (B, H, S, D)
_QT = [2, 64, 4, 32]  # (B, S, H, D)

#: One realistic call per mapped op (dims, types, concrete values by schema position) and the
#: problem it must land in.
SAMPLES: dict[str, tuple[str, list[Any], list[str], list[Any]]] = {
    "aten::rms_norm": ("rms_norm", [[8, 256], [], [256], []], [BF, "ScalarList", BF, "Scalar"],
                       [None, [256], None, 1e-6]),
    "aten::_fused_rms_norm": ("rms_norm", [[8, 256], [], [256], []],
                              [BF, "ScalarList", BF, "Scalar"], [None, [256], None, 1e-6]),
    "_C::rms_norm": ("rms_norm", [[8, 256], [8, 256], [256], []], [BF, BF, BF, "Scalar"],
                     [None, None, None, 1e-5]),
    "sgl_kernel::rmsnorm": ("rms_norm", [[8, 256], [8, 256], [256], [], []],
                            [BF, BF, BF, "Scalar", "Scalar"], [None, None, None, 1e-6, False]),
    "_C::fused_add_rms_norm": ("fused_add_rms_norm", [[8, 256], [8, 256], [256], []],
                               [BF, BF, BF, "Scalar"], [None, None, None, 1e-6]),
    "sgl_kernel::fused_add_rmsnorm": ("fused_add_rms_norm", [[8, 256], [8, 256], [256], [], []],
                                      [BF, BF, BF, "Scalar", "Scalar"],
                                      [None, None, None, 1e-6, True]),
    "aten::layer_norm": ("layer_norm", [[4, 1, 256], [], [256], [256], [], []],
                         [BF, "ScalarList", BF, BF, "Scalar", "Scalar"],
                         [None, [256], None, None, 1e-5, True]),
    "aten::native_layer_norm": ("layer_norm", [[300, 9000], [], [9000], [9000], []],
                                [BF, "ScalarList", BF, BF, "Scalar"],
                                [None, [9000], None, None, 1e-5]),
    "aten::linalg_vector_norm": ("l2_norm", [[8, 256], [], [], [], []],
                                 [BF, "Scalar", "ScalarList", "Scalar", ""],
                                 [None, 2, [-1], True, None]),
    "_C::silu_and_mul": ("silu_and_mul", [[8, 128], [8, 256]], [BF, BF], [None, None]),
    "sgl_kernel::silu_and_mul": ("silu_and_mul", [[2, 3, 64], [2, 3, 128]], [BF, BF], [None, None]),
    "aten::scaled_dot_product_attention": (
        "attention_forward", [_Q, _Q, _Q, [], [], [], [], []],
        [BF, BF, BF, "", "Scalar", "Scalar", "", "Scalar"],
        [None, None, None, None, 0.0, False, None, False]),
    "aten::_scaled_dot_product_flash_attention": (
        "unified_attention", [_Q, [2, 2, 64, 32], [2, 2, 64, 32], [], [], [], []],
        [BF, BF, BF, "Scalar", "Scalar", "Scalar", ""], [None, None, None, 0.0, True, False, None]),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (
        "attention_forward", [_Q, _Q, _Q, [], [], [], []],
        [BF, BF, BF, "Scalar", "Scalar", "", "Scalar"],
        [None, None, None, 0.0, False, None, 32**-0.5]),
    "aten::_scaled_dot_product_efficient_attention": (
        "attention_forward", [_Q, _Q, _Q, [], [], [], [], []],
        [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", ""],
        [None, None, None, None, True, 0.0, False, None]),
    "aten::_scaled_dot_product_cudnn_attention": (
        "unified_attention", [_Q, _Q, _Q, [], [], [], [], [], []],
        [BF, BF, BF, "", "Scalar", "Scalar", "Scalar", "Scalar", ""],
        [None, None, None, None, True, 0.0, True, False, None]),
    "aten::_flash_attention_forward": (
        "attention_forward", [_QT, _QT, _QT, [], [], [], [], [], [], [], []],
        [BF, BF, BF, "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""],
        [None, None, None, None, None, 64, 64, 0.0, False, False, None]),
    "aten::_efficient_attention_forward": (
        "unified_attention", [_QT, _QT, _QT, [], [], [], [], [], [], [], [], []],
        [BF, BF, BF, "", "", "", "Scalar", "Scalar", "Scalar", "Scalar", "Scalar", ""],
        [None, None, None, None, None, None, 64, 64, 0.0, 1, True, None]),
    "aten::topk": ("topk_filter", [[4, 2048], [], [], [], []],
                   [FP32, "Scalar", "Scalar", "Scalar", "Scalar"], [None, 50, -1, True, True]),
    "aten::_scaled_mm": ("block_scaled_mm",
                         [[256, 512], [512, 384], [256, 4], [4, 3], [], [], [], []],
                         [FP8, FP8, FP32, FP32, "", "", "Scalar", "Scalar"],
                         [None, None, None, None, None, None, 15, False]),
    "_C::cutlass_scaled_mm": ("block_scaled_mm",
                              [[256, 384], [256, 512], [384, 512], [256, 4], [3, 4], []],
                              [BF, FP8, FP8, FP32, FP32, ""], [None] * 6),
    "sgl_kernel::fp8_blockwise_scaled_mm": ("block_scaled_mm",
                                            [[70, 512], [512, 384], [70, 4], [4, 3], []],
                                            [FP8, FP8, FP32, FP32, "Scalar"], [None] * 4 + [15]),
    "_C::dynamic_per_token_scaled_fp8_quant": ("fp8_dynamic_per_token_quant",
                                               [[8, 256], [8, 256], [8, 1], []],
                                               [FP8, BF, FP32, ""], [None] * 4),
    "_C::rms_norm_dynamic_per_token_quant": (
        "fused_rmsnorm_quant", [[8, 256], [8, 256], [256], [8, 1], [], [], [8, 256]],
        [FP8, BF, BF, FP32, "Scalar", "", BF], [None, None, None, None, 1e-6, None, None]),
    "_C::rotary_embedding": ("fused_qkv_rope", [[8], [8, 256], [8, 128], [], [4096, 64], []],
                             [I64, BF, BF, "Scalar", BF, "Scalar"],
                             [None, None, None, 64, None, True]),
    "_C_cache_ops::reshape_and_cache_flash": (
        "reshape_and_cache", [[8, 2, 64], [8, 2, 64], [10, 16, 2, 64], [10, 16, 2, 64], [8], [],
                              [], []],
        [BF, BF, BF, BF, I64, "", FP32, FP32], [None] * 5 + ["auto", None, None]),
    "_C::reshape_and_cache_flash": (
        "reshape_and_cache", [[1, 2, 64], [1, 2, 64], [10, 32, 2, 64], [10, 32, 2, 64], [1], [],
                              [], []],
        [BF, BF, BF, BF, I64, "", FP32, FP32], [None] * 8),
    "_moe_C::topk_softmax": ("moe_topk_gating_softmax",
                             [[8, 2], [8, 2], [8, 2], [8, 16], []],
                             [FP32, I32, I32, FP32, "Scalar"], [None] * 4 + [False]),
    "sgl_kernel::topk_softmax": ("moe_topk_gating_softmax",
                                 [[100, 8], [100, 8], [100, 128], [], [], []],
                                 [FP32, I32, FP32, "Scalar", "Scalar", ""],
                                 [None, None, None, False, 0.0, None]),
    "_moe_C::moe_align_block_size": ("moe_align_block_size",
                                     [[8, 2], [], [], [100], [8], [1]],
                                     [I32, "Scalar", "Scalar", I32, I32, I32],
                                     [None, 16, 16, None, None, None]),
    "sgl_kernel::moe_align_block_size": ("moe_align_block_size",
                                         [[80, 8], [], [], [900], [30], [1], [17], []],
                                         [I32, "Scalar", "Scalar", I32, I32, I32, I32, "Scalar"],
                                         [None, 128, 64, None, None, None, None, True]),
    "_moe_C::moe_sum": ("moe_sum_reduce", [[8, 2, 256], [8, 256]], [BF, BF], [None, None]),
}  # fmt: skip


def _sample(name: str, **changes: Any) -> OpCall:
    _, dims, types, concrete = SAMPLES[name]
    dims, types, concrete = list(dims), list(types), list(concrete)
    for index, (d, t, c) in changes.items():
        position = int(index[1:])
        dims[position], types[position], concrete[position] = d, t, c
    return OpCall(name, tuple(dims), tuple(types), tuple(concrete))


def test_every_mapped_op_has_a_sample() -> None:
    assert SAMPLES.keys() == OP_MAP.keys()


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_mapping_gives_kwargs_its_problem_accepts(name: str, repo_root: Path) -> None:
    mapped = map_call(_sample(name))

    assert not isinstance(mapped, str), mapped
    assert mapped.problem == SAMPLES[name][0]
    assert mapped.phase == PHASE_RULES[mapped.problem](mapped.input_kwargs)
    # The loader checks the kwargs against the reference's Model.__init__ and _make_inputs.
    folder = repo_root / "configs" / "suites" / "atrex30" / mapped.problem
    spec = yaml.safe_load((folder / "op.yaml").read_text())
    case = {"id": "t0", "init_kwargs": mapped.init_kwargs, "input_kwargs": mapped.input_kwargs}
    spec["shapes"] = {"cases": [case]}
    parse_op_yaml_text(yaml.safe_dump(spec), base_dir=folder, source=f"{name} sample")


@pytest.mark.parametrize(
    ("name", "change", "reason"),
    [
        ("aten::rms_norm", {"i0": ([8, 256], "float", None)}, "fp32, not bf16"),
        ("aten::rms_norm", {"i2": ([], "", None)}, "no weight"),
        ("aten::layer_norm", {"i3": ([], "", None)}, "no affine weight and bias"),
        ("aten::scaled_dot_product_attention", {"i3": (_Q[:1] + [64, 64], BF, None)}, "mask"),
        ("aten::scaled_dot_product_attention", {"i5": ([], "Scalar", None)}, "not recorded"),
        ("aten::scaled_dot_product_attention", {"i1": ([2, 4, 80, 32], BF, None)}, "differ"),
        ("aten::topk", {"i0": ([4, 128], "float", None)}, "not a vocabulary"),
        ("aten::_scaled_mm", {"i2": ([], "float", None)}, "not 1x128"),
        ("_C::rotary_embedding", {"i5": ([], "Scalar", False)}, "GPT-J"),
        ("_moe_C::topk_softmax", {"i3": ([8, 16], BF, None)}, "bf16, not fp32"),
        ("_C::reshape_and_cache_flash", {"i2": ([10, 16, 2, 64], FP8, None)}, "fp8_e4m3fn"),
    ],
)
def test_calls_outside_the_problem_are_refused_with_a_reason(
    name: str, change: dict[str, Any], reason: str
) -> None:
    refused = map_call(_sample(name, **change))

    assert isinstance(refused, str)
    assert refused.startswith(SAMPLES[name][0]) and reason in refused


def test_docs_list_every_mapped_op(repo_root: Path) -> None:
    table = (repo_root / "docs" / "trace-import.md").read_text(encoding="utf-8")
    section = table[table.index("## 4. Which operators") : table.index("## 5.")]

    assert [name for name in OP_MAP if f"`{name}`" not in section] == []
    assert [p for p in {m.problem for m in OP_MAP.values()} if f"| {p} " not in section] == []


def test_unknown_ops_are_not_mapped() -> None:
    assert map_call(OpCall("aten::cumsum", ([4, 4], [], []))) == (
        "no atrex30 problem for this operator"
    )


@pytest.mark.parametrize("problem", sorted(PHASE_RULES))
def test_phase_rules_agree_with_the_builtin_shapes(problem: str) -> None:
    # The built-in phases come from each reference's phase_of (scripts/build_atrex30.py).
    for shape in load_suite("atrex30").problem(problem).shapes:
        assert PHASE_RULES[problem](shape.input_kwargs) == shape.phase, shape.id


# --- GPU ----------------------------------------------------------------------------------------


@pytest.mark.gpu
# torch 2.11's profiler warns on start about cycles (a user's trace may carry the same warning)
@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")
def test_cuda_trace_attributes_kernels_to_their_ops(tmp_path: Path) -> None:
    from torch.profiler import ProfilerActivity, profile

    from aka.bench.trace import dump_key_averages

    bf16 = torch.bfloat16
    x = torch.randn(4096, 2048, device="cuda", dtype=bf16)
    w = torch.randn(2048, device="cuda", dtype=bf16)
    q = torch.randn(4, 8, 1024, 64, device="cuda", dtype=bf16)

    def work() -> None:
        F.rms_norm(x, (2048,), w, 1e-6)
        F.scaled_dot_product_attention(q, q, q)
        F.scaled_dot_product_attention(q, q, q, is_causal=True)

    work()  # warm up: kernel selection and lazy initialisation stay out of the trace
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as p:
        for _ in range(REPEATS):
            work()
        torch.cuda.synchronize()
    chrome = tmp_path / "cuda_trace.json"
    p.export_chrome_trace(str(chrome))
    averages = dump_key_averages(p, tmp_path / "key_averages.json")
    inclusive = {a.key: a.device_time_total for a in p.key_averages()}

    profile_ = read_trace(chrome, OP_MAP.keys())
    by_name: dict[str, float] = {}
    for item in profile_.work:
        by_name[item.call.name] = by_name.get(item.call.name, 0.0) + item.time_us

    assert profile_.basis == "gpu"
    # CUPTI's own GPU activity (seen on the H200 with torch 2.11: 13 us once per session) is
    # counted by key_averages in whichever op it interrupted; the importer leaves it out.
    overhead = inclusive.get("Activity Buffer Request", 0.0)
    for key in ("aten::rms_norm", "aten::scaled_dot_product_attention"):
        got, want = by_name[key], inclusive[key]
        assert got == pytest.approx(want, rel=0.01) or got == pytest.approx(
            want - overhead, rel=0.01
        ), (key, by_name, inclusive)
    result = import_trace(chrome, tmp_path / "suite")
    weights = {op.name: op.weight for op in result.operators}
    assert {"rms_norm", "attention_forward", "unified_attention"} <= weights.keys()
    attention = weights["attention_forward"] + weights["unified_attention"]
    expected = by_name["aten::rms_norm"] / by_name["aten::scaled_dot_product_attention"]
    assert weights["rms_norm"] / attention == pytest.approx(expected, rel=0.02)
    for op in load_suite(tmp_path / "suite").operators:
        load_suite(tmp_path / "suite").problem(op.name)
    from_averages = read_trace(averages, OP_MAP.keys())
    assert from_averages.basis == "gpu"
    # key_averages cannot separate CUPTI's buffer request from the op it interrupted
    assert from_averages.total_us == pytest.approx(
        profile_.total_us, rel=0.01
    ) or from_averages.total_us == pytest.approx(profile_.total_us + overhead, rel=0.01)
