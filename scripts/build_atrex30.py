"""Build the atrex30 suite's derived files from the upstream data and the references written here.

    python scripts/build_atrex30.py            # (re)write configs/suites/atrex30/
    python scripts/build_atrex30.py --check    # exit 1 if a derived file is missing or stale

Inputs:
- ``configs/suites/atrex30/upstream/`` — the Atrex-Bench data, verbatim (Apache-2.0; ``LICENSE``,
  ``NOTICE``, ``SOURCE.txt`` with the commit): ``operator_importance.json`` and per operator
  ``shapes.json`` + ``metadata.json``. ``--sync-upstream DIR`` refreshes it from a checkout of
  the shared data (``../shared/external/atrex_bench``).
- ``configs/suites/atrex30/<op>/reference.py`` — written here: ``Model``, ``_make_inputs``,
  ``OP_FAMILY``, ``SMOKE`` cases, ``FP8_SCALES``, ``TOLERANCE`` (when the scorer's table does not
  fit) and, for "prefill/decode" operators,
  ``phase_of`` (the one written rule giving each shape a phase); optional hand-written
  ``roofline.yaml`` (roofline overrides with reasons), ``library.py`` (the library baseline) and
  ``holdout.yaml`` (rules for generated holdout shapes), inlined into / named by ``op.yaml``.

Outputs (derived; never edit by hand): ``suite.yaml`` (operators, importance weights normalised to
sum to 1, phases, shape counts, the source commit) and per operator ``op.yaml`` + ``shapes.yaml``
(the upstream tune shapes unchanged, each with its phase, then the smoke cases). Inputs an operator
updates in place (a KV-cache write) are found by running the reference once on its first smoke
case and declared as ``in_place``. This script runs the suite's own reference code (written in
this repository); ``aka.spec`` itself never does.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import yaml

from aka.bench.problem_runtime import load_module

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "configs" / "suites" / "atrex30"
UPSTREAM = SUITE / "upstream"
HEADER = "# Derived by scripts/build_atrex30.py from upstream/ and reference.py: do not edit.\n"


def _reference(op: str) -> types.ModuleType:
    return load_module(f"_atrex30_build_{op}", SUITE / op / "reference.py")


def _in_place(module: types.ModuleType) -> list[str]:
    """Forward inputs the reference changes, found on its first smoke case (on the CPU)."""
    import torch

    case = module.SMOKE[0]
    torch.manual_seed(0)
    inputs = module._make_inputs(**case["input_kwargs"], device="cpu")
    before = {k: v.clone() for k, v in inputs.items() if isinstance(v, torch.Tensor)}
    with torch.no_grad():
        module.Model(**(case.get("init_kwargs") or {}))(**inputs)
    return [k for k, v in before.items() if not torch.equal(v, inputs[k])]


def _phase(module: types.ModuleType, meta_phase: str, input_kwargs: dict[str, Any]) -> str:
    if meta_phase in ("prefill", "decode"):
        return meta_phase
    return str(module.phase_of(**input_kwargs))


def _hand_written(op: str) -> dict[str, Any]:
    """op.yaml fields kept in their own hand-written files next to the reference.

    ``roofline.yaml`` (a list of roofline overrides, each with its reason) becomes ``roofline``;
    ``library.py`` (the best library path PyTorch has for the operator) becomes ``library`` and
    adds the ``library`` baseline; ``holdout.yaml`` (the rules of generated holdout shapes, see
    docs/suites.md) becomes ``holdout``.
    """
    fields: dict[str, Any] = {}
    roofline = SUITE / op / "roofline.yaml"
    if roofline.is_file():
        fields["roofline"] = yaml.safe_load(roofline.read_text())
    if (SUITE / op / "library.py").is_file():
        fields["library"] = {"path": "library.py"}
        fields["baselines"] = ["eager", "torch_compile", "library"]
    holdout = SUITE / op / "holdout.yaml"
    if holdout.is_file():
        fields["holdout"] = yaml.safe_load(holdout.read_text())
    return fields


def _dump(data: Any) -> str:
    return HEADER + yaml.safe_dump(data, sort_keys=False, width=100, default_flow_style=None)


def render() -> dict[Path, str]:
    """Every derived file's path and text."""
    importance = json.loads((UPSTREAM / "operator_importance.json").read_text())["operators"]
    total = sum(float(v["importance_score"]) for v in importance.values())
    source = (UPSTREAM / "SOURCE.txt").read_text()
    commit = next(
        (ln.split()[1] for ln in source.splitlines() if ln.startswith("Commit:")), "unknown"
    )
    files: dict[Path, str] = {}
    operators = []
    for op in sorted(importance):
        if not (SUITE / op / "reference.py").is_file():
            continue
        module = _reference(op)
        meta = json.loads((UPSTREAM / op / "metadata.json").read_text())
        shapes = json.loads((UPSTREAM / op / "shapes.json").read_text())
        cases = []
        for sid, case in shapes.items():
            kwargs = case.get("input_kwargs") or {}
            cases.append(
                {
                    "id": str(sid),
                    "init_kwargs": case.get("init_kwargs") or {},
                    "input_kwargs": kwargs,
                    "phase": _phase(module, meta["phase"], kwargs),
                    "split": "tune",
                }
            )
        for case in module.SMOKE:
            cases.append(
                {
                    "id": case["id"],
                    "init_kwargs": case.get("init_kwargs") or {},
                    "input_kwargs": case["input_kwargs"],
                    "phase": _phase(module, meta["phase"], case["input_kwargs"]),
                    "split": "smoke",
                }
            )
        files[SUITE / op / "shapes.yaml"] = _dump(cases)
        doc = (module.__doc__ or op).strip().splitlines()[0]
        spec: dict[str, Any] = {
            "version": 1,
            "name": op,
            "op_family": module.OP_FAMILY,
            "description": doc,
            "reference": {"path": "reference.py"},
            "shapes": {"path": "shapes.yaml"},
        }
        in_place = _in_place(module)
        if in_place:
            spec["in_place"] = in_place
        if getattr(module, "FP8_SCALES", None):
            spec["fp8_scales"] = dict(module.FP8_SCALES)
        if getattr(module, "TOLERANCE", None):
            spec["tolerance"] = dict(module.TOLERANCE)
        spec |= _hand_written(op)
        files[SUITE / op / "op.yaml"] = _dump(spec)
        tune = [c for c in cases if c["split"] == "tune"]
        operators.append(
            {
                "name": op,
                "problem": f"{op}/op.yaml",
                "weight": round(float(importance[op]["importance_score"]) / total, 6),
                "importance_score": float(importance[op]["importance_score"]),
                "phase": meta["phase"],
                "tune_shapes": len(tune),
                "phases": {
                    p: sum(c["phase"] == p for c in tune)
                    for p in ("prefill", "decode")
                    if any(c["phase"] == p for c in tune)
                },
                "smoke_shapes": len(module.SMOKE),
            }
        )
    suite = {
        "name": "atrex30",
        "description": "The 30 operators and 440 shapes of Atrex-Bench, drawn from production "
        "inference traces and weighted by their share of GPU time.",
        "source": {
            "repository": "https://github.com/alibaba/atrex-bench",
            "commit": commit,
            "license": "Apache-2.0 (upstream/LICENSE, upstream/NOTICE)",
        },
        "weights": "importance_score / sum over the 30 operators "
        f"(upstream scores sum to {total:.5f})",
        "operators": operators,
    }
    files[SUITE / "suite.yaml"] = _dump(suite)
    return files


def sync_upstream(source: Path) -> None:
    """Copy the upstream data verbatim into ``configs/suites/atrex30/upstream``."""
    UPSTREAM.mkdir(parents=True, exist_ok=True)
    for name in ("LICENSE", "NOTICE", "SOURCE.txt"):
        shutil.copyfile(source / name, UPSTREAM / name)
    shutil.copyfile(
        source / "data" / "operator_importance.json", UPSTREAM / "operator_importance.json"
    )
    for op_dir in sorted(p for p in (source / "data").iterdir() if p.is_dir()):
        (UPSTREAM / op_dir.name).mkdir(exist_ok=True)
        for name in ("shapes.json", "metadata.json"):
            shutil.copyfile(op_dir / name, UPSTREAM / op_dir.name / name)


def stale() -> list[Path]:
    """Derived files that are missing or differ from what ``render`` produces."""
    return [
        path for path, text in render().items() if not path.is_file() or path.read_text() != text
    ]


def main(argv: list[str] | None = None) -> int:
    """Write or check the derived files; return the exit code."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--check", action="store_true", help="Exit 1 if anything is stale.")
    parser.add_argument("--sync-upstream", type=Path, help="Copy the upstream data from DIR.")
    args = parser.parse_args(argv)
    if args.sync_upstream:
        sync_upstream(args.sync_upstream)
    if args.check:
        bad = stale()
        for path in bad:
            sys.stdout.write(f"stale: {path.relative_to(REPO)}\n")
        return 1 if bad else 0
    for path, text in render().items():
        path.write_text(text)
        sys.stdout.write(f"wrote {path.relative_to(REPO)}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
