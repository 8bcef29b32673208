"""Generated holdout shapes: the op.yaml rules, the seeded generator, the seed, loader checks."""

from __future__ import annotations

import math
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aka.core.config import BenchConfig
from aka.core.errors import ConfigError, SpecError
from aka.spec import (
    CATEGORIES,
    HoldoutSpec,
    Phase,
    ProblemSpec,
    Split,
    evaluate_quantity,
    generate_holdout,
    holdout_seed,
    holdout_violations,
    load_problem,
    with_holdout,
)

from .conftest import WriteSpec

CAP = 16 * 2**30
#: Rules over the fixture reference's kwargs (tokens, hidden) and its Model(eps).
HOLDOUT: dict[str, Any] = {
    "dims": {
        "tokens": {"role": "batch", "min": 1, "max": 65536},
        "hidden": {"role": "feature", "min": 16, "max": 8192, "multiple_of": 16},
    },
    "realistic": [{"hidden": 4096}, {"hidden": 2048}],
    "memory": {"inputs": "tokens * hidden * 4 + hidden * 4", "outputs": "tokens * hidden * 4"},
    "phase_rule": {"of": "tokens", "decode_at_most": 64},
}
TUNE = [
    {"id": f"t{i}", "init_kwargs": {"eps": 1e-6}, "input_kwargs": {"tokens": t, "hidden": h}}
    for i, (t, h) in enumerate([(1, 64), (37, 512), (300, 1024), (4096, 256), (2048, 2048)])
]
SMOKE = [{"id": "s0", "input_kwargs": {"tokens": 3, "hidden": 32}, "split": "smoke"}]

#: A varlen reference: sequences of seq_lens tokens, num_seqs of them, packed rows of width hidden.
VARLEN_REFERENCE = """\
import torch


class Model(torch.nn.Module):
    def forward(self, x, cu):
        return x * 2


def _make_inputs(seq_lens, num_seqs, shape, device: str = "cuda"):
    total = sum(seq_lens[:num_seqs])
    return {"x": torch.randn(total, shape[-1], device=device),
            "cu": torch.zeros(num_seqs + 1, dtype=torch.int32, device=device)}
"""
VARLEN_HOLDOUT: dict[str, Any] = {
    "dims": {"shape[-1]": {"role": "feature", "min": 8, "max": 4096}},
    "lists": {
        "seq_lens": {
            "length": {"role": "batch", "min": 1, "max": 32},
            "element": {"role": "seq", "min": 1, "max": 8192},
        }
    },
    "derived": {"num_seqs": "len(seq_lens)"},
    "realistic": [{"shape[-1]": 128}],
    "memory": {"inputs": "sum(seq_lens) * shape[-1] * 4 + (num_seqs + 1) * 4"},
    "phase_rule": {"of": "max(seq_lens)", "decode_at_most": 1},
}


def _problem(write_spec: WriteSpec, holdout: dict[str, Any] | None = None, **extra: Any) -> Any:
    changes: dict[str, Any] = {"shapes": {"cases": TUNE + SMOKE}, **extra}
    if holdout is not None:
        changes["holdout"] = holdout
    return load_problem(write_spec(changes))


@pytest.fixture
def problem(write_spec: WriteSpec) -> ProblemSpec:
    return _problem(write_spec, HOLDOUT)


def _category(case_id: str) -> str:
    return case_id.split("_")[1]


def test_generate_holdout_is_deterministic_per_seed_and_operator(problem: ProblemSpec) -> None:
    first = generate_holdout(problem, 7, memory_cap_bytes=CAP)
    again = generate_holdout(problem, 7, memory_cap_bytes=CAP)
    other_seed = generate_holdout(problem, 8, memory_cap_bytes=CAP)
    renamed = generate_holdout(problem.model_copy(update={"name": "x"}), 7, memory_cap_bytes=CAP)

    assert first == again
    kwargs = [(c.init_kwargs, c.input_kwargs) for c in first]
    assert kwargs != [(c.init_kwargs, c.input_kwargs) for c in other_seed]
    assert kwargs != [(c.init_kwargs, c.input_kwargs) for c in renamed]


def test_generate_holdout_draws_every_category_and_count(problem: ProblemSpec) -> None:
    cases = generate_holdout(problem, 3, count=11, memory_cap_bytes=CAP)
    eight = generate_holdout(problem, 3, count=8, memory_cap_bytes=CAP)

    assert len(cases) == 11 and len({c.id for c in cases}) == 11
    assert [_category(c.id) for c in cases[:6]] == list(CATEGORIES)
    assert {_category(c.id) for c in cases[6:]} <= set(CATEGORIES)
    assert [c.id for c in cases[:6]] == [f"holdout_{k}_{i}" for i, k in enumerate(CATEGORIES)]
    assert cases[:6] == eight[:6]  # raising the count keeps the earlier shapes
    assert all(c.split is Split.HOLDOUT and c.weight == 1.0 for c in cases)
    with pytest.raises(ValueError, match="at least 6"):
        generate_holdout(problem, 3, count=5, memory_cap_bytes=CAP)


@pytest.mark.parametrize("seed", range(6))
def test_generated_shapes_keep_the_rules_and_avoid_known_shapes(
    problem: ProblemSpec, seed: int
) -> None:
    known = [(s.init_kwargs, s.input_kwargs) for s in problem.shapes]
    for case in generate_holdout(problem, seed, memory_cap_bytes=CAP):
        tokens, hidden = case.input_kwargs["tokens"], case.input_kwargs["hidden"]
        assert isinstance(tokens, int) and isinstance(hidden, int)
        assert holdout_violations(problem, case) == []
        assert 1 <= tokens <= 65536 and 16 <= hidden <= 8192 and hidden % 16 == 0
        assert (case.init_kwargs, case.input_kwargs) not in known
        assert case.init_kwargs == {"eps": 1e-6}
        assert case.phase is (Phase.DECODE if tokens <= 64 else Phase.PREFILL)


@pytest.mark.parametrize("seed", range(6))
def test_each_category_does_what_it_says(problem: ProblemSpec, seed: int) -> None:
    tune = [
        (s.input_kwargs["tokens"], s.input_kwargs["hidden"])
        for s in problem.shapes_in({Split.TUNE})
    ]
    by_category = {
        _category(c.id): c.input_kwargs
        for c in generate_holdout(problem, seed, memory_cap_bytes=CAP)[:6]
    }
    t, h = (by_category["edge"][k] for k in ("tokens", "hidden"))
    assert isinstance(t, int) and isinstance(h, int)
    near_block = [b for b in (2**i for i in range(4, 14)) if abs(t - b) == 1 or abs(h - b) == 1]
    assert t == 1 or near_block, by_category["edge"]
    up, down = by_category["scaleup"], by_category["scaledown"]
    assert any(h0 == up["hidden"] and 2 <= up["tokens"] / t0 <= 4.01 for t0, h0 in tune), up
    assert any(h0 == down["hidden"] and 2 <= t0 / down["tokens"] <= 8.5 for t0, h0 in tune), down
    values = [by_category["alignment"]["tokens"], by_category["alignment"]["hidden"]]
    assert any(isinstance(v, int) and v > 1 and v % 32 for v in values)
    t, h = (by_category["aspect"][k] for k in ("tokens", "hidden"))
    assert isinstance(t, int) and isinstance(h, int) and max(t / h, h / t) >= 32
    assert by_category["realistic"]["hidden"] in (4096, 2048)


def test_memory_cap_shrinks_shapes_or_names_the_category(problem: ProblemSpec) -> None:
    small = 256 * 2**10  # 256 KiB: shapes must shrink to fit
    assert HOLDOUT["memory"]["inputs"]
    for case in generate_holdout(problem, 1, memory_cap_bytes=small):
        names = {**case.init_kwargs, **case.input_kwargs}
        assert problem.holdout is not None
        assert problem.holdout.memory.total(names) <= small

    with pytest.raises(
        SpecError, match=r"tiny_rms: cannot draw a valid 'edge' .* 100 bytes"
    ) as err:
        generate_holdout(problem, 1, memory_cap_bytes=100)
    assert err.value.field == "holdout" and "holdout_memory_cap_gb" in str(err.value)


def test_phase_rule_constant_and_threshold() -> None:
    spec = HoldoutSpec.model_validate({**HOLDOUT, "phase_rule": {"constant": "prefill"}})
    assert spec.phase_rule.phase({"tokens": 1}) is Phase.PREFILL
    threshold = HoldoutSpec.model_validate(HOLDOUT).phase_rule
    assert threshold.phase({"tokens": 64}) is Phase.DECODE
    assert threshold.phase({"tokens": 65}) is Phase.PREFILL


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"phase_rule": {"constant": "decode", "of": "tokens", "decode_at_most": 1}}, "either"),
        ({"phase_rule": {"of": "tokens"}}, "either"),
        ({"dims": {"a b": {"role": "batch"}}}, "name\\[index\\]"),
        ({"dims": {}}, "at least one rule"),
        ({"realistic": []}, "at least 1"),
        ({"dims": {"tokens": {"role": "rows"}}}, "role"),
        ({"extra": 1}, "Extra inputs"),
    ],
)
def test_holdout_spec_rejects_bad_rules(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        HoldoutSpec.model_validate({**HOLDOUT, **change})


def test_with_holdout_appends_and_keeps_file_holdout_cases(write_spec: WriteSpec) -> None:
    mine = {"id": "h_mine", "input_kwargs": {"tokens": 5, "hidden": 48}, "split": "holdout"}
    problem = load_problem(write_spec({"shapes": {"cases": [*TUNE, mine]}, "holdout": HOLDOUT}))

    grown = with_holdout(problem, 2, count=8, memory_cap_bytes=CAP)

    assert [s.id for s in grown.shapes[: len(problem.shapes)]] == [s.id for s in problem.shapes]
    assert [s.id for s in grown.shapes[len(problem.shapes) :]] == [
        c.id for c in generate_holdout(problem, 2, memory_cap_bytes=CAP)
    ]
    assert len(grown.shapes_in({Split.HOLDOUT})) == 9
    plain = _problem(write_spec)
    assert with_holdout(plain, 2, memory_cap_bytes=CAP) is plain
    with pytest.raises(SpecError, match="no holdout rules"):
        generate_holdout(plain, 2, memory_cap_bytes=CAP)


def test_with_holdout_refuses_a_taken_id(write_spec: WriteSpec) -> None:
    taken = {
        "id": "holdout_edge_0",
        "input_kwargs": {"tokens": 5, "hidden": 48},
        "split": "holdout",
    }
    problem = load_problem(write_spec({"shapes": {"cases": [*TUNE, taken]}, "holdout": HOLDOUT}))

    with pytest.raises(SpecError, match="holdout_edge_0.*reserved"):
        with_holdout(problem, 2, memory_cap_bytes=CAP)


def test_list_rules_index_lengths_and_derived_kwargs(write_spec: WriteSpec) -> None:
    cases = [
        {"id": f"t{i}", "input_kwargs": {"seq_lens": s, "num_seqs": len(s), "shape": [0, w]}}
        for i, (s, w) in enumerate([([64], 256), ([300, 300], 128), ([17, 900, 40], 512)])
    ]
    problem = load_problem(
        write_spec(
            {"shapes": {"cases": cases}, "holdout": VARLEN_HOLDOUT}, reference=VARLEN_REFERENCE
        )
    )
    generated = generate_holdout(problem, 5, count=12, memory_cap_bytes=CAP)

    for case in generated:
        kw = case.input_kwargs
        seq_lens, shape = kw["seq_lens"], kw["shape"]
        assert isinstance(seq_lens, list) and isinstance(shape, list)
        assert kw["num_seqs"] == len(seq_lens) and 1 <= len(seq_lens) <= 32
        assert all(isinstance(n, int) and 1 <= n <= 8192 for n in seq_lens)
        assert shape[0] == 0 and isinstance(shape[1], int) and 8 <= shape[1] <= 4096
        assert case.phase is (Phase.DECODE if max(seq_lens) == 1 else Phase.PREFILL)
        assert holdout_violations(problem, case) == []
    assert any(len(set(c.input_kwargs["seq_lens"])) > 1 for c in generated)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"dims": {"hiden": {"role": "feature"}}},
            r"holdout\.dims\.hiden: no shape has a kwarg 'hiden'",
        ),
        (
            {"tied": ["tokens"]},
            r"holdout\.tied\.tokens: a tied kwarg must appear in init_kwargs and",
        ),
        ({"realistic": [{"hiddn": 4}]}, r"holdout\.realistic\[0\]\.hiddn: no shape"),
        (
            {"lists": {"tokens": {"length": {"role": "batch"}, "element": {"role": "seq"}}}},
            r"holdout\.lists\.tokens: tokens=.* is not a list",
        ),
        (
            {"memory": {"inputs": "tokens * width"}},
            r"holdout\.memory\.inputs on shape 't0': unknown name 'width'",
        ),
        (
            {"phase_rule": {"of": "tokens", "decode_at_most": 1}},
            r"holdout\.phase_rule gives 'prefill' for shape 't1', which says 'decode'",
        ),
    ],
)
def test_loader_rejects_holdout_rules_that_do_not_fit_the_shapes(
    write_spec: WriteSpec, change: dict[str, Any], message: str
) -> None:
    cases = [
        {**c, "phase": "decode" if c["input_kwargs"]["tokens"] <= 64 else "prefill"} for c in TUNE
    ]
    path = write_spec({"shapes": {"cases": cases}, "holdout": {**HOLDOUT, **change}})

    with pytest.raises(SpecError, match=message) as err:
        load_problem(path)
    assert err.value.file == str(path)


def test_holdout_seed_prefers_the_setting(tmp_path: Path) -> None:
    assert holdout_seed(BenchConfig(holdout_seed=42), tmp_path) == 42
    assert not (tmp_path / "holdout_seed").exists()


def test_holdout_seed_is_made_once_private(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = holdout_seed(BenchConfig(), cache)
    path = cache / "holdout_seed"

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert holdout_seed(BenchConfig(), cache) == first
    assert int(path.read_text()) == first


def test_holdout_seed_rejects_a_corrupt_file(tmp_path: Path) -> None:
    (tmp_path / "holdout_seed").write_text("not a seed")

    with pytest.raises(ConfigError, match="not an integer seed; delete it"):
        holdout_seed(BenchConfig(), tmp_path)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sum(seq_lens) * shape[-1]", 18 * 7),
        ("prod(shape) / shape[-1]", 3.0),
        ("len(seq_lens) + max(seq_lens) + min(seq_lens)", 3 + 10 + 3),
        ("shape[0] * shape[-2]", 3.0),
        ("max(shape[0], 2)", 3.0),
    ],
)
def test_expressions_read_list_kwargs(expression: str, expected: float) -> None:
    names = {"seq_lens": [3, 5, 10], "shape": [3, 1, 7], "tokens": 4}
    assert evaluate_quantity(expression, names) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("shape[tokens]", "constant integer"),
        ("shape[1:2]", "constant integer"),
        ("shape[3]", "has 3 elements"),
        ("tokens[0]", "not a list of numbers"),
        ("max(tokens)", "max takes 2 or more"),
        ("sum(tokens, 1)", "is not allowed"),
        ("max(empty)", "the list is empty"),
        ("shape * 2", "not a number"),
    ],
)
def test_expressions_reject_bad_list_use(expression: str, message: str) -> None:
    names = {"shape": [3, 1, 7], "tokens": 4, "empty": []}
    with pytest.raises(ValueError, match=message):
        evaluate_quantity(expression, names)
    assert math.isfinite(evaluate_quantity("prod(shape)", names))
