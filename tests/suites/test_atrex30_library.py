"""The atrex30 suite's library baselines (issue #6, point 4), checked against the references.

Each ``configs/suites/atrex30/<op>/library.py`` is the best library path PyTorch has for the
operator (SDPA, cuBLAS, fused norms...), timed as the ``library`` baseline. The scorer checks a
baseline against the reference before timing it and drops one that fails, so here, at every smoke
shape on the CPU (and, marked ``gpu``, at the smoke shapes and the first tune shape on CUDA), the
library and the reference are built under the same seed (the reference's weights loaded when the
state_dict keys match, as the scorer does), called on clones of the same inputs for each of the
scorer's seeds, and compared with the scorer's own comparison (``Scorer.compare_with``: the
problem's tolerance policy, fp8 scales and reduction length). The library must also keep the
reference's constructor and forward signatures, and the suite loader must accept it.
"""

from __future__ import annotations

import inspect
import types
from pathlib import Path
from typing import Any

import pytest

from aka.bench import CheckOutcome, Scorer
from aka.bench.problem_runtime import (
    ProblemRuntime,
    clone_inputs,
    flatten_outputs,
    load_module,
)
from aka.bench.run_state import _Run
from aka.bench.worker import _load_weights
from aka.core.config import BenchConfig
from aka.spec import ProblemSpec, load_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "suites" / "atrex30"
LIBRARY_OPS = sorted(p.parent.name for p in SUITE.glob("*/library.py"))
SEEDS = BenchConfig().seeds


def _problem(op: str) -> ProblemSpec:
    return load_suite("atrex30").problem(op)


def _library(op: str, path: Path | None = None) -> types.ModuleType:
    path = path or SUITE / op / "library.py"
    return load_module(f"_atrex30_library_{op}_{abs(hash(str(path)))}", path)


def _outputs(model: Any, inputs: dict[str, Any], in_place: list[str]) -> dict[str, Any]:
    """Call ``model`` on ``inputs`` and save its outputs the way a scorer worker does."""
    import torch

    with torch.no_grad():
        out = model(**inputs)
    structure, tensors = flatten_outputs(out)
    return {
        "structure": structure,
        "tensors": {k: t.cpu() for k, t in tensors.items()},
        "extra": {k: inputs[k].cpu() for k in in_place},
    }


def _compare(
    problem: ProblemSpec, reference: Any, model: Any, inputs: dict[str, Any], workdir: Path
) -> CheckOutcome:
    """Run both models on clones of ``inputs``; compare as ``Scorer.compare_with`` does."""
    device = next(v.device.type for v in inputs.values() if hasattr(v, "device"))
    scorer = Scorer(BenchConfig(), workdir, device="cpu" if device == "cpu" else "cuda")
    run = _Run(problem=problem, source="", shapes=[], skipped=[], mode=scorer.mode)
    ref = _outputs(reference, clone_inputs([], inputs)[1], problem.in_place)
    cand = _outputs(model, clone_inputs([], inputs)[1], problem.in_place)
    lengths = [int(v.shape[-1]) for v in inputs.values() if hasattr(v, "shape") and v.dim()]
    return scorer.compare_with(run, cand, ref, Scorer._override(run), max(lengths, default=0))


def check_library(
    problem: ProblemSpec, library: types.ModuleType, shape_id: str, device: str, workdir: Path
) -> CheckOutcome:
    """The scorer's verdict on ``library`` against the reference, over every seed of one shape.

    Both models are built under the seed's model seed (the reference's weights loaded into the
    library's when their state_dict keys match) and called on clones of the same inputs.

    Returns:
        The first failing outcome, else the worst accepted one.
    """
    shape = next(s for s in problem.shapes if s.id == shape_id).model_dump(mode="json")
    rt = ProblemRuntime.load(problem.to_worker_json(), workdir, device)
    worst: CheckOutcome | None = None
    for seed in SEEDS:
        reference = rt.build_model(rt.reference.Model, shape, seed)
        model = rt.build_model(library.Model, shape, seed)
        _load_weights(model, reference)
        _, inputs = rt.make_inputs(shape, seed)
        outcome = _compare(problem, reference, model, inputs, workdir)
        if not outcome.ok:
            outcome.message = f"{problem.name}/{shape_id} seed {seed}: {outcome.message}"
            return outcome
        worst = outcome if worst is None else worst.combined(outcome)
    assert worst is not None
    return worst


def _shape_ids(problem: ProblemSpec, split: str) -> list[str]:
    return [s.id for s in problem.shapes if s.split == split]


def test_some_operators_have_a_library_baseline() -> None:
    assert len(LIBRARY_OPS) >= 10, LIBRARY_OPS


@pytest.mark.parametrize("op", LIBRARY_OPS)
def test_library_keeps_the_reference_contract(op: str) -> None:
    problem = _problem(op)  # the loader validates the library file too
    assert problem.library_code == (SUITE / op / "library.py").read_text()
    assert "library" in problem.baselines
    library = _library(op)
    reference = load_module(f"_atrex30_reference_{op}", SUITE / op / "reference.py")
    assert library.__doc__ and " via " in library.__doc__.strip().splitlines()[0], "name the path"
    assert library.__doc__.strip().startswith(op), "the docstring's first line names the operator"
    for method in ("__init__", "forward"):
        mine = inspect.signature(getattr(library.Model, method))
        theirs = inspect.signature(getattr(reference.Model, method))
        assert list(mine.parameters.items()) == list(theirs.parameters.items()), (op, method)
    imported = {
        n.split()[1].split(".")[0]
        for n in (SUITE / op / "library.py").read_text().splitlines()
        if n.startswith(("import ", "from "))
    }
    assert imported <= {"torch", "math"}, imported
    assert len((SUITE / op / "library.py").read_text().splitlines()) < 150


@pytest.mark.parametrize("op", LIBRARY_OPS)
def test_library_weights_load_from_the_reference(op: str) -> None:
    import torch

    shape = next(s for s in _problem(op).shapes if s.split == "smoke")
    library = _library(op)
    reference = load_module(f"_atrex30_reference_{op}", SUITE / op / "reference.py")
    torch.manual_seed(0)
    ref = reference.Model(**shape.init_kwargs)
    torch.manual_seed(0)
    mine = library.Model(**shape.init_kwargs)
    expected = "none" if not ref.state_dict() else "loaded"
    assert _load_weights(mine, ref) == expected


@pytest.mark.parametrize("op", LIBRARY_OPS)
def test_library_matches_the_reference_on_the_cpu(op: str, tmp_path: Path) -> None:
    problem = _problem(op)
    library = _library(op)
    for shape_id in _shape_ids(problem, "smoke"):
        outcome = check_library(problem, library, shape_id, "cpu", tmp_path)
        assert outcome.ok, outcome.message


def test_a_wrong_library_fails_the_comparison(tmp_path: Path) -> None:
    """A copy of a library whose output is doubled is rejected (so the check can fail)."""
    op = "rms_norm" if "rms_norm" in LIBRARY_OPS else LIBRARY_OPS[0]
    wrong = tmp_path / "wrong_library.py"
    wrong.write_text(
        (SUITE / op / "library.py").read_text()
        + "\n\n_Right = Model\n\n\nclass Model(_Right):\n"
        + "    def forward(self, *args, **kwargs):\n"
        + "        out = super().forward(*args, **kwargs)\n"
        + "        if isinstance(out, dict):\n"
        + "            return {k: v * 2 for k, v in out.items()}\n"
        + "        if isinstance(out, tuple):\n"
        + "            return tuple(v * 2 for v in out)\n"
        + "        return out * 2\n"
    )
    problem = _problem(op)
    shape_id = _shape_ids(problem, "smoke")[0]
    assert check_library(problem, _library(op), shape_id, "cpu", tmp_path).ok
    outcome = check_library(problem, _library(op, wrong), shape_id, "cpu", tmp_path)
    assert not outcome.ok and "outside" in outcome.message, outcome.message


def test_the_loader_rejects_a_library_with_another_forward(tmp_path: Path) -> None:
    from aka.core import SpecError
    from aka.spec import load_problem

    op = "rms_norm" if "rms_norm" in LIBRARY_OPS else LIBRARY_OPS[0]
    for name in ("op.yaml", "shapes.yaml", "reference.py"):
        (tmp_path / name).write_text((SUITE / op / name).read_text())
    source = (SUITE / op / "library.py").read_text()
    (tmp_path / "library.py").write_text(
        source.replace("def forward(self, ", "def forward(self, z, ")
    )
    with pytest.raises(SpecError, match="library"):
        load_problem(tmp_path / "op.yaml")


def _edge_inputs(op: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Inputs no smoke shape draws, for the library's other branch (init kwargs, inputs)."""
    import torch

    reference = load_module(f"_atrex30_reference_{op}", SUITE / op / "reference.py")
    torch.manual_seed(0)
    if op == "mla_decode_attention":  # sequences of different lengths: one call each
        init = {"nhead": 4, "kv_lora_rank": 32, "qk_rope_head_dim": 16}
        inputs = reference._make_inputs(3, 9, 4, 32, 16, device="cpu")
        inputs["seq_lens"] = torch.tensor([5, 9, 13], dtype=torch.int32)
        return init, inputs
    # unified_attention: queries shorter than their keys (a chunk of a prefill with history)
    inputs = reference._make_inputs(2, [21, 40], 4, 2, 64, 16, device="cpu")
    inputs["q"] = inputs["q"][:12]
    inputs["cu_seqlens_q"] = torch.tensor([0, 5, 12], dtype=torch.int32)
    return {}, inputs


@pytest.mark.parametrize(
    "op",
    [o for o in ("mla_decode_attention", "unified_attention") if o in LIBRARY_OPS],
)
def test_library_branches_no_smoke_shape_reaches(op: str, tmp_path: Path) -> None:
    import torch

    init, inputs = _edge_inputs(op)
    reference = load_module(f"_atrex30_reference_{op}", SUITE / op / "reference.py")
    torch.manual_seed(0)
    outcome = _compare(
        _problem(op), reference.Model(**init), _library(op).Model(**init), inputs, tmp_path
    )
    assert outcome.ok, outcome.message


@pytest.mark.gpu
@pytest.mark.parametrize("op", LIBRARY_OPS)
def test_library_matches_the_reference_on_cuda(op: str, tmp_path: Path) -> None:
    problem = _problem(op)
    library = _library(op)
    shape_ids = _shape_ids(problem, "smoke") + _shape_ids(problem, "tune")[:1]
    for shape_id in shape_ids:
        outcome = check_library(problem, library, shape_id, "cuda", tmp_path)
        assert outcome.ok, outcome.message
