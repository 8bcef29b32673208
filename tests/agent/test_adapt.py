"""The kernel adapter: unification of symbolic launcher contracts with real inputs, and the files.

Most tests build input signatures by hand (no worker); a few run the real CPU scorer on a problem
outside configs/examples, to prove an adapted reference kernel is an accepted candidate.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

from aka.agent.adapt import AdaptError, InPlaceMismatchError, adapt_kernel, map_arguments
from aka.bench import ArgInfo, InputSignature, Scorer, TensorInfo, screen_source
from aka.core import AgentError, BenchConfig
from aka.kb import LoadedKernel, load_kernels
from aka.spec import KernelMeta, kernel_header, load_problem, read_source_facts

REPO = Path(__file__).resolve().parents[2]
KERNELS_ROOT = REPO / "reference_kernels"
FIXTURES = REPO / "tests" / "fixtures" / "problems"


# ------------------------------------------------------------------ helpers
def t(name: str, shape: tuple[int, ...], dtype: str = "bf16") -> ArgInfo:
    return ArgInfo(name=name, kind="tensor", shape=list(shape), dtype=dtype)


def s(name: str, value: float | int | bool | str) -> ArgInfo:
    return ArgInfo(name=name, kind="scalar", value=value, type_name=type(value).__name__)


def o(shape: tuple[int, ...], dtype: str = "bf16", name: str = "0") -> TensorInfo:
    return TensorInfo(name=name, shape=list(shape), dtype=dtype)


def sig(
    forward: list[ArgInfo],
    outputs: list[TensorInfo],
    init: list[ArgInfo] = (),  # type: ignore[assignment]
    parameters: list[TensorInfo] = (),  # type: ignore[assignment]
    in_place: list[str] = (),  # type: ignore[assignment]
) -> InputSignature:
    init = list(init)
    kind = "tensor" if len(outputs) == 1 else "tuple"
    outs = [o.model_copy(update={"name": str(i)}) for i, o in enumerate(outputs)]
    return InputSignature(
        problem_name="p",
        shape_id="s",
        device="cpu",
        forward_args=forward,
        init_args=init,
        forward_params_text=", ".join(["self", *(a.name for a in forward)]),
        init_params_text=", ".join(["self", *(f"{a.name}={a.value!r}" for a in init)]),
        parameters=list(parameters),
        output_kind=kind,
        outputs=outs,
        in_place=list(in_place),
    )


@pytest.fixture(scope="module")
def kernels() -> dict[str, LoadedKernel]:
    loaded, problems = load_kernels(KERNELS_ROOT)
    assert not problems
    return {k.meta.id: k for k in loaded}


def meta(kernels: dict[str, LoadedKernel], kid: str) -> KernelMeta:
    return kernels[kid].meta


RMS = sig(
    [t("hidden_states", (2, 3, 999), "fp32"), t("gamma", (999,), "fp32")],
    [o((2, 3, 999), "fp32")],
    init=[s("epsilon", 1e-5)],
)


# ------------------------------------------------------------------ unification and mapping
def test_map_renamed_inputs_by_their_shapes_and_scalar_aliases(kernels):
    plan = map_arguments(meta(kernels, "rms_norm_rowwise"), RMS)
    assert plan.tensors["x"].source == "hidden_states" and plan.tensors["x"].view == "hidden_states"
    assert plan.tensors["weight"].source == "gamma"
    assert plan.scalars == {"eps": "self.epsilon"}  # the model's value, never a baked constant
    assert plan.dims == {"N": 999}
    assert plan.returns == ["_out"]


def test_map_does_not_depend_on_argument_order_or_names(kernels):
    swapped = sig([t("g", (999,), "fp32"), t("h", (5, 999), "fp32")], [o((5, 999), "fp32")])
    plan = map_arguments(meta(kernels, "rms_norm_rowwise"), swapped)
    assert (plan.tensors["x"].source, plan.tensors["weight"].source) == ("h", "g")
    assert plan.scalars == {}  # eps keeps the launcher's default


def test_map_binds_a_multiple_of_a_symbol(kernels):
    plan = map_arguments(
        meta(kernels, "silu_and_mul_rowwise"), sig([t("x", (8, 2000))], [o((8, 1000))])
    )
    assert plan.dims == {"D": 1000}
    with pytest.raises(AdaptError, match=r"1999, not a multiple of 2"):
        map_arguments(
            meta(kernels, "silu_and_mul_rowwise"), sig([t("x", (8, 1999))], [o((8, 999))])
        )


ROPE_INPUTS = [
    t("positions", (33,), "int64"),
    t("query", (33, 4 * 64)),
    t("key", (33, 2 * 64)),
    t("cos_sin_cache", (512, 32), "fp32"),
]


def test_map_splits_flattened_heads_with_a_scalar_that_gives_the_head_size(kernels):
    rope = sig(ROPE_INPUTS, [o((33, 256)), o((33, 128))], init=[s("head_size", 64)])
    plan = map_arguments(meta(kernels, "rope_cos_sin_cache"), rope)
    assert plan.dims["D"] == 64 and plan.dims["H"] == 4 and plan.dims["HKV"] == 2
    q = plan.tensors["q"]
    assert q.source == "query" and q.reshaped and q.shape == (33, 4, 64)
    assert (
        q.view
        == "query.reshape(query.shape[0], query.shape[1] // (self.head_size), self.head_size)"
    )
    assert plan.returns == ["_out[0].reshape(query.shape)", "_out[1].reshape(key.shape)"]


def test_map_splits_out_a_single_head(kernels):
    one_kv_head = [t("positions", (7,), "int64"), t("q", (7, 5 * 80)), t("k", (7, 80))]
    rope = sig(
        [*one_kv_head, t("cos_sin_cache", (512, 32), "fp32")],
        [o((7, 400)), o((7, 80))],
        init=[s("head_dim", 80)],
    )
    plan = map_arguments(meta(kernels, "rope_cos_sin_cache"), rope)
    assert (plan.dims["H"], plan.dims["HKV"], plan.tensors["k"].shape) == (5, 1, (7, 1, 80))


def test_map_refuses_to_guess_how_a_flattened_dim_splits(kernels):
    rope = sig(ROPE_INPUTS, [o((33, 256)), o((33, 128))])
    with pytest.raises(AdaptError, match=r"cannot tell the sizes apart.*dims"):
        map_arguments(meta(kernels, "rope_cos_sin_cache"), rope)


def test_map_passes_a_transposed_view_where_the_layout_allows_any_strides(kernels):
    weight_layout = sig([t("a", (33, 128)), t("b", (96, 128))], [o((33, 96))])
    plan = map_arguments(meta(kernels, "gemm_tiled"), weight_layout)
    assert plan.tensors["b"].view == "b" and plan.dims == {"M": 33, "K": 128, "N": 96}
    matmul_layout = sig([t("a", (33, 128)), t("b", (128, 96))], [o((33, 96))])
    plan = map_arguments(meta(kernels, "gemm_tiled"), matmul_layout)
    assert plan.tensors["b"].view == "b.transpose(-2, -1)" and plan.tensors["b"].transposed


def test_map_flattens_leading_dims_and_restores_them_on_the_outputs(kernels):
    quant = sig([t("x", (2, 3, 64))], [o((2, 3, 64), "fp8_e4m3fn"), o((2, 3, 1), "fp32")])
    plan = map_arguments(meta(kernels, "per_token_quant_fp8"), quant)
    assert plan.tensors["x"].view == "x.reshape(x.shape[0] * x.shape[1], x.shape[2])"
    assert plan.returns == [
        "_out[0].reshape(x.shape)",
        "_out[1].reshape(*x.shape[:2], _out[1].shape[1])",
    ]


def test_map_picks_the_outputs_the_reference_returns(kernels):
    # the fused kernel returns (q, scale, residual_out); residual_out exists only with a residual
    fused = sig([t("x", (4, 64)), t("w", (64,))], [o((4, 64), "fp8_e4m3fn"), o((4, 1), "fp32")])
    plan = map_arguments(meta(kernels, "rms_norm_quant_fp8_fused"), fused)
    assert plan.returns == ["_out[0]", "_out[1]"]
    no_residual = sig([t("x", (4, 64)), t("w", (64,))], [o((4, 64))])
    with pytest.raises(AdaptError, match="reference output 0"):
        map_arguments(meta(kernels, "rms_norm_quant_fp8_fused"), no_residual)


@pytest.mark.parametrize(
    ("kid", "signature", "message"),
    [
        (
            "block_scaled_mm_fp8",
            sig([t("a", (8, 256)), t("b", (16, 256))], [o((8, 16), "fp32")]),
            r"launcher parameter 'a' \['M', 'K'\]: 'a' is bf16; a takes \['fp8_e4m3fn'\]",
        ),
        (
            "rms_norm_rowwise",
            sig([t("x", (4, 99)), t("w", (99,)), t("bias", (99,))], [o((4, 99))]),
            r"forward tensor 'bias' \[99\] \(bf16\) matches no launcher parameter",
        ),
        (
            "moe_topk_gating_softmax",
            sig([t("logits", (4, 8), "fp32")], [o((4, 2), "fp32"), o((4, 2), "int32")]),
            r"'top_k' \(scalar int\) is required.*no scalar named",
        ),
        (
            "gated_rms_norm",
            sig([t("x", (4, 99)), t("z", (4, 99)), t("w", (99,))], [o((4, 99)), o((4, 99))]),
            r"reference output 1 \[4, 99\] \(bf16\) matches no remaining output",
        ),
        (
            "rms_norm_rowwise",
            sig([t("x", (4, 99)), t("w", (99,)), s("scale", 2.0)], [o((4, 99))]),
            r"forward argument 'scale' \(scalar\) matches no parameter",
        ),
        (
            "fused_add_rms_norm_rowwise",
            sig([t("x", (8, 64)), t("r", (4, 64)), t("w", (64,))], [o((8, 64)), o((8, 64))]),
            r"leading dims",
        ),
        (
            "rms_norm_rowwise",
            sig([t("x", (4, 99)), t("w", (99,))], [o((4, 99))], init=[s("eps", "small")]),
            r"'eps' takes a float, but the problem's 'eps' is 'small'",
        ),
    ],
    ids=["dtype", "extra-tensor", "required-scalar", "outputs", "extra-scalar", "lead", "type"],
)
def test_map_failures_name_the_argument_and_the_reason(kernels, kid, signature, message):
    with pytest.raises(AdaptError, match=message) as caught:
        required = set(
            read_source_facts(kernels[kid].text).functions[meta(kernels, kid).launcher].required
        )
        map_arguments(meta(kernels, kid), signature, required=required)
    assert caught.value.message.startswith(f"{kid}: ")
    assert isinstance(caught.value, AgentError) and caught.value.code == "agent.adapt"


def test_map_needs_only_the_forward_scalars_every_call_passes(kernels):
    left_at_default = ArgInfo(name="dim", kind="scalar", value=-1, type_name="int", provided=False)
    plan = map_arguments(
        meta(kernels, "softmax_rowwise"),
        sig([t("x", (4, 99), "fp32"), left_at_default], [o((4, 99), "fp32")]),
    )
    assert plan.tensors["x"].source == "x" and plan.scalars == {}
    passed = left_at_default.model_copy(update={"provided": True})
    with pytest.raises(AdaptError, match="forward argument 'dim'"):
        map_arguments(
            meta(kernels, "softmax_rowwise"),
            sig([t("x", (4, 99), "fp32"), passed], [o((4, 99), "fp32")]),
        )


def test_map_refuses_a_header_without_a_contract(kernels):
    bare = meta(kernels, "rms_norm_rowwise").model_copy(update={"args": {}, "returns": []})
    with pytest.raises(AdaptError, match="declares no launcher contract"):
        map_arguments(bare, RMS)


# ------------------------------------------------------------------ list arguments, head views
def header(args: str, returns: str, extra: str = "") -> KernelMeta:
    """A kernel header written here: these contracts must not change under other sessions."""
    text = f"""
id: made_up
title: A contract for the adapter's tests
op_family: rope
dsl: triton
arch: [sm_90]
dtypes: [bf16]
bound: memory
launcher: made_up
args: {args}
returns: {returns}
{extra}
"""
    return KernelMeta.model_validate(yaml.safe_load(text))


def seq(name: str, value: list[int]) -> ArgInfo:
    return ArgInfo(name=name, kind="sequence", value=value, type_name="list")


MROPE_TENSORS = (
    "q: {shape: [T, HQ, D], dtypes: [bf16], flattened: true}, "
    "k: {shape: [T, HK, D], like: q, flattened: true}, "
    "cos: {shape: [3, T, R2], dtypes: [fp32]}, sin: {shape: [3, T, R2], dtypes: [fp32]}"
)
MROPE_RETURNS = "[{shape: [T, HQ, D], dtype: q}, {shape: [T, HK, D], dtype: q}]"
MROPE_DIMS = "dims: {D: [head_size], HQ: [num_query_heads], HK: [num_kv_heads]}"


def mrope(kv_heads: int, section: list[int]) -> InputSignature:
    """atrex30/mrope's call: flat q (T, HQ*D), k (T, HK*D); sections a list given to __init__."""
    tables = [t("cos", (3, 7, 32), "fp32"), t("sin", (3, 7, 32), "fp32")]
    return sig(
        [t("q", (7, 4 * 64)), t("k", (7, kv_heads * 64)), *tables],
        [o((7, 4 * 64), name="q"), o((7, kv_heads * 64), name="k")],
        init=[s("head_size", 64), seq("mrope_section", section)],
    )


def test_map_passes_a_list_init_argument_whole_or_by_item():
    whole = header(f"{{{MROPE_TENSORS}, sections: {{type: ['list[int]', str], default: '', "
                   "aliases: [mrope_section]}}", MROPE_RETURNS, MROPE_DIMS)  # fmt: skip
    plan = map_arguments(whole, mrope(1, [8, 12, 12]))
    assert plan.scalars == {"sections": "self.mrope_section"}
    items = ", ".join(
        f"section_{c}: {{type: int, default: 0, aliases: ['mrope_section[{i}]']}}"
        for i, c in enumerate("thw")
    )
    plan = map_arguments(header(f"{{{MROPE_TENSORS}, {items}}}", MROPE_RETURNS, MROPE_DIMS),
                         mrope(1, [8, 12, 12]))  # fmt: skip
    assert plan.scalars == {
        "section_t": "self.mrope_section[0]",
        "section_h": "self.mrope_section[1]",
        "section_w": "self.mrope_section[2]",
    }
    assert plan.unused_init == []  # the list is used (through its items)


def test_map_refuses_a_list_for_a_scalar_parameter():
    one = header(f"{{{MROPE_TENSORS}, mrope_section: {{type: str, default: ''}}}}",
                 MROPE_RETURNS, MROPE_DIMS)  # fmt: skip
    with pytest.raises(AdaptError, match=r"'mrope_section' takes a str, but .* is \[8, 12, 12\]"):
        map_arguments(one, mrope(1, [8, 12, 12]))


def test_map_gives_a_dim_scalar_to_a_launcher_scalar_of_that_name_too():
    meta = header(f"{{{MROPE_TENSORS}, head_size: {{type: int, default: 128}}}}",
                  MROPE_RETURNS, MROPE_DIMS)  # fmt: skip
    plan = map_arguments(meta, mrope(2, [8, 12, 12]))
    assert plan.dims["D"] == 64 and plan.scalars == {"head_size": "self.head_size"}


def test_map_views_outputs_back_as_their_inputs_when_one_kv_head_hides_the_split():
    import torch

    plan = map_arguments(
        header(f"{{{MROPE_TENSORS}}}", MROPE_RETURNS, MROPE_DIMS), mrope(1, [8, 12, 12])
    )
    # sizes alone merge (7, 1, 64) into (7 * 1, 64): wrong as soon as HK > 1
    assert plan.returns == ["_out[0].reshape(q.shape)", "_out[1].reshape(k.shape)"]
    q, k = torch.zeros(5, 4 * 80), torch.zeros(5, 3 * 80)  # another shape: three KV heads
    _out = (q.reshape(5, 4, 80), k.reshape(5, 3, 80))
    views = [eval(r, {"_out": _out, "q": q, "k": k}) for r in plan.returns]  # noqa: S307
    assert [tuple(v.shape) for v in views] == [(5, 320), (5, 240)]


# ------------------------------------------------------------------ in-place writes
CACHE_ARGS = "{key: {shape: [N, D], dtypes: [bf16]}, key_cache: {shape: [S, D], like: key}, " \
    "slot: {shape: [N], dtypes: [int64]}}"  # fmt: skip
CACHE_INPUTS = [t("key", (5, 64)), t("key_cache", (40, 64)), t("slot", (5,), "int64")]


def test_map_an_in_place_kernel_onto_a_problem_that_declares_the_input():
    in_place = header(CACHE_ARGS, "[{alias: key_cache}]")
    plan = map_arguments(in_place, sig(CACHE_INPUTS, [o((40, 64))], in_place=["key_cache"]))
    assert plan.tensors["key_cache"].source == "key_cache" and plan.returns == ["_out"]
    # a state written in place and not returned: declared by the own problem's in_place
    state = header(CACHE_ARGS, "[{shape: [N, D], dtype: key}]",
                   "problem: {shapes: [{n: 5}], in_place: [key_cache]}")  # fmt: skip
    plan = map_arguments(state, sig(CACHE_INPUTS, [o((5, 64))], in_place=["key_cache"]))
    assert plan.tensors["key_cache"].source == "key_cache"


def test_map_refuses_an_in_place_kernel_on_a_functional_problem_by_name():
    in_place = header(CACHE_ARGS, "[{alias: key_cache}]")
    functional = sig(CACHE_INPUTS, [o((40, 64))])
    with pytest.raises(InPlaceMismatchError) as caught:
        map_arguments(in_place, functional)
    message = caught.value.message
    assert caught.value.code == "agent.adapt.in_place" and isinstance(caught.value, AdaptError)
    assert message.startswith("made_up on p: in-place mismatch: made_up writes problem 'p'")
    assert "input 'key_cache' in place (launcher parameter 'key_cache'" in message
    assert "in_place: [] (none)" in message and "mutated_input" in message
    assert "Use a kernel that returns new tensors" in message


def test_map_refuses_a_functional_kernel_on_an_in_place_problem_by_name():
    functional = header(CACHE_ARGS, "[{shape: [S, D], dtype: key}]")
    in_place = sig(CACHE_INPUTS, [o((40, 64))], in_place=["key_cache"])
    with pytest.raises(InPlaceMismatchError, match=(
        r"problem 'p' updates its input 'key_cache' in place \(in_place: \['key_cache'\]\), "
        r"but made_up's header declares no in-place write of launcher parameter 'key_cache'"
    )):  # fmt: skip
        map_arguments(functional, in_place)


# ------------------------------------------------------------------ the candidate file
def test_adapt_kernel_writes_a_self_contained_candidate(kernels):
    k = kernels["rms_norm_multirow"]
    source = adapt_kernel(k.path, k.meta, RMS, params={"block_m": 4, "num_warps": 2})
    tree = ast.parse(source)
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert {"rms_norm_multirow", "ModelNew"} <= names
    assert not names & {"reference", "make_inputs"}
    assert "reference_kernels" not in source
    header, _ = kernel_header(source, source="candidate.py")
    cand = KernelMeta.model_validate(header)
    assert cand.status == "candidate" and cand.tuning == {"block_m": [4], "num_warps": [2]}
    model = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew")
    init, forward = (f for f in model.body if isinstance(f, ast.FunctionDef))
    assert ast.unparse(init.args) == "self, epsilon=1e-05"
    assert ast.unparse(forward.args) == "self, hidden_states, gamma"
    call = ast.unparse(forward)
    assert "eps=self.epsilon" in call and "block_m=4" in call and "num_warps=2" in call
    assert screen_source(source).passed


def test_adapt_kernel_annotates_forward_scalars_so_the_screen_sees_no_tensor_math(kernels):
    # block_size as a forward scalar (a kernel's own problem passes it so): the launcher's
    # `block_size < 1` check is plain Python, not a comparison on a tensor
    scalars = sig(
        [t("topk_ids", (5, 2), "int32"), s("block_size", 4), s("num_experts", 3)],
        [o((24,), "int32"), o((6,), "int32"), o((1,), "int32")],
    )
    k = kernels["moe_align_block_size_atomic"]
    source = adapt_kernel(k.path, k.meta, scalars, params={})
    assert "def forward(self, topk_ids, block_size: int, num_experts: int):" in source
    assert screen_source(source).passed
    unannotated = source.replace("block_size: int, num_experts: int", "block_size, num_experts")
    assert not screen_source(unannotated).passed


def test_adapt_kernel_rejects_unknown_tuning_parameters(kernels):
    k = kernels["rms_norm_rowwise"]
    with pytest.raises(AdaptError, match=r"\['block_q'\] are not in the header's tuning"):
        adapt_kernel(k.path, k.meta, RMS, params={"block_q": 2})


def test_adapt_kernel_declares_weights_the_scorer_can_load(kernels, tmp_path):
    scaled = sig(
        [t("x", (7, 100), "fp32")],
        [o((7, 100), "fp32")],
        init=[s("hidden", 100)],
        parameters=[TensorInfo(name="scale", shape=[100], dtype="fp32", kind="parameter")],
    )
    k = kernels["rms_norm_rowwise"]
    source = adapt_kernel(k.path, k.meta, scaled, params={})
    assert "self.scale = torch.nn.Parameter(torch.empty((hidden,), dtype=torch.float32)" in source
    assert "weight=self.scale" in source


def test_every_reference_kernel_declares_its_whole_launcher(kernels):
    for kid, k in kernels.items():
        assert k.meta.adaptable, kid
        launcher = read_source_facts(k.text).functions[k.meta.launcher]
        declared = [p for p in launcher.params if p not in k.meta.tuning]
        assert list(k.meta.args) == declared, kid


# ------------------------------------------------------------------ every example is served
EXAMPLES = {
    "rms_norm": (
        sig([t("x", (8, 1000)), t("weight", (1000,))], [o((8, 1000))], [s("eps", 1e-6)]),
        "norm",
    ),
    "fused_add_rms_norm": (
        sig(
            [t("x", (8, 1000)), t("residual", (8, 1000)), t("weight", (1000,))],
            [o((8, 1000)), o((8, 1000))],
            [s("eps", 1e-6)],
        ),
        "norm",
    ),
    "silu_and_mul": (sig([t("x", (8, 2000))], [o((8, 1000))]), "activation"),
    "softmax": (sig([t("x", (33, 1000), "fp32")], [o((33, 1000), "fp32")]), "softmax"),
    "fp8_quant": (
        sig([t("x", (8, 1000))], [o((8, 1000), "fp8_e4m3fn"), o((8, 1), "fp32")]),
        "quantization",
    ),
    "rotary_embedding": (
        sig(
            [
                t("positions", (33,), "int64"),
                t("q", (33, 512)),
                t("k", (33, 256)),
                t("cos_sin_cache", (512, 128), "fp32"),
            ],
            [o((33, 512)), o((33, 256))],
            [s("head_dim", 128)],
        ),
        "rope",
    ),
    "gemm_bf16": (sig([t("a", (33, 128)), t("b", (96, 128))], [o((33, 96))]), "gemm"),
}
SERVED = {
    "rms_norm": 3,
    "fused_add_rms_norm": 2,
    "silu_and_mul": 2,
    "softmax": 2,
    "fp8_quant": 2,
    "rotary_embedding": 2,
    "gemm_bf16": 3,
}


@pytest.mark.parametrize("example", list(EXAMPLES))
def test_each_example_is_served_by_adaptable_designs(kernels, example):
    signature, family = EXAMPLES[example]
    served = []
    for kid, k in kernels.items():
        if k.meta.op_family.value != family:
            continue
        try:
            source = adapt_kernel(k.path, k.meta, signature, params={})
        except AdaptError:
            continue
        assert screen_source(source).passed, kid
        served.append(kid)
    assert len(served) >= SERVED[example], served


# ------------------------------------------------------------------ the real scorer
@pytest.fixture(scope="module")
def scorer(tmp_path_factory: pytest.TempPathFactory) -> Scorer:
    return Scorer(
        BenchConfig(worker_timeout_s=120.0), tmp_path_factory.mktemp("cache"), device="cpu"
    )


def test_adapted_kernel_is_accepted_on_a_problem_outside_the_examples(kernels, scorer):
    problem = load_problem(FIXTURES / "rmsnorm_renamed" / "op.yaml")
    signature = scorer.input_signature(problem)
    assert [a.name for a in signature.forward_args] == ["hidden_states", "gamma"]
    k = kernels["rms_norm_rowwise"]
    source = adapt_kernel(k.path, k.meta, signature, params={"num_warps": 2})
    result = scorer.evaluate(problem, source)
    assert result.accepted, result.failure
    # both smoke shapes ran: the 3D input with an odd width, and a second epsilon
    assert [r.shape_id for r in result.shapes] == ["smoke_b2_s3_h999", "smoke_b1_s5_h130"]


def test_a_wrong_design_that_maps_is_still_judged_by_the_scorer(kernels, scorer):
    # layer norm fits the same contract; the scorer, not the adapter, rejects its numbers
    problem = load_problem(FIXTURES / "rmsnorm_renamed" / "op.yaml")
    k = kernels["layer_norm_rowwise"]
    source = adapt_kernel(k.path, k.meta, scorer.input_signature(problem), params={})
    assert scorer.evaluate(problem, source).verdict.value == "wrong_output"


SCALE_KERNEL = '''"""
---
id: scale_rows
title: Rows times a per-column scale, a test kernel for weights held by the model
op_family: elementwise
dsl: triton
arch: [any]
dtypes: [fp32]
bound: memory
launcher: scale_rows
tuning: {block: [128, 1024]}
args:
  x: {shape: [..., N], dtypes: [fp32]}
  w: {shape: [N], dtypes: [fp32]}
returns: [{shape: [..., N], dtype: x}]
---
y = x * w over the last dimension.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _scale_rows_kernel(x_ptr, w_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    for start in range(0, N, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask)
        w = tl.load(w_ptr + cols, mask=mask)
        tl.store(y_ptr + row * N + cols, x * w, mask=mask)


def scale_rows(x, w, *, block=128):
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    y = torch.empty_like(x2)
    _scale_rows_kernel[(x2.shape[0],)](x2, w, y, x2.shape[1], BLOCK=block)
    return y.reshape(x.shape)


def reference(x, w):
    return x * w


def make_inputs(shape, dtype, device="cpu"):
    return {}
'''


def test_weights_held_by_the_model_are_declared_and_loaded_by_the_scorer(scorer, tmp_path):
    path = tmp_path / "reference_kernels" / "triton" / "elementwise" / "scale_rows.py"
    path.parent.mkdir(parents=True)
    path.write_text(SCALE_KERNEL)
    (k,), problems = load_kernels(tmp_path / "reference_kernels")
    assert not problems
    problem = load_problem(FIXTURES / "scaled_rows" / "op.yaml")
    signature = scorer.input_signature(problem)
    assert [p.name for p in signature.parameters] == ["scale"]
    source = adapt_kernel(k.path, k.meta, signature, params={"block": 1024})
    assert "self.scale = torch.nn.Parameter(torch.empty((hidden,)" in source
    result = scorer.evaluate(problem, source)
    assert result.accepted, result.failure
    assert result.manifest.weights_mode == "loaded"  # same names and shapes as the reference


@pytest.mark.slow
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_every_design_of_an_example_on_the_cpu_scorer(kernels, scorer, example):
    """The sweep behind SERVED: the family's designs in load order, default tuning, real scorer.

    It stops at SERVED accepted designs: each evaluation is a few seconds in the interpreter, and
    the family grows with the knowledge base. Every kernel's own tests check the rest.
    """
    problem = load_problem(REPO / "configs" / "examples" / example / "op.yaml")
    signature = scorer.input_signature(problem)
    accepted = []
    for kid, k in kernels.items():
        if k.meta.op_family != problem.op_family:
            continue
        params = {"round_act": False} if "round_act" in k.meta.tuning else {}
        try:
            source = adapt_kernel(k.path, k.meta, signature, params=params)
        except AdaptError:
            continue
        if scorer.evaluate(problem, source).accepted:
            accepted.append(kid)
            if len(accepted) == SERVED[example]:
                break
    assert len(accepted) >= SERVED[example], accepted
