"""Inside a worker: turn a ``ProblemSpec`` into live objects (modules, models, inputs, outputs).

Runs only in scorer worker processes (it executes problem code). Owns seeding, input drawing,
weight sharing between reference and candidate, and the flattening of outputs into named tensors.
"""

from __future__ import annotations

import importlib.util
import random
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BadStructure",
    "ProblemRuntime",
    "clone_inputs",
    "flatten_outputs",
    "input_seed",
    "load_module",
    "model_seed",
    "named_inputs",
    "seed_everything",
]

_INPUT_SEED_MUL, _INPUT_SEED_ADD = 7919, 17


class BadStructure(Exception):
    """The model returned something other than a tensor, a tuple/list or a dict of tensors."""


def model_seed(seed: int) -> int:
    """Seed under which models (and their weights) are built."""
    return seed


def input_seed(seed: int) -> int:
    """Seed under which inputs are drawn; distinct from the model seed."""
    return seed * _INPUT_SEED_MUL + _INPUT_SEED_ADD


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy (if present) and torch (CPU and every GPU)."""
    import torch

    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % (2**32))
    except ImportError:  # pragma: no cover - numpy is a dependency
        pass
    torch.manual_seed(seed)


def load_module(name: str, path: Path) -> types.ModuleType:
    """Import the file at ``path`` as module ``name`` (registered, so pickling and Triton work)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def flatten_outputs(out: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split a model output into a structure record and named tensors.

    Raises:
        BadStructure: An element is not a plain tensor.
    """
    import torch

    def check(key: str, value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            raise BadStructure(f"output {key!r} is {type(value).__name__}, not a torch.Tensor")
        return value

    if isinstance(out, torch.Tensor):
        kind, tensors = "tensor", {"0": check("0", out)}
    elif isinstance(out, tuple | list):
        kind, tensors = "tuple", {str(i): check(str(i), v) for i, v in enumerate(out)}
    elif isinstance(out, dict):
        kind, tensors = "dict", {str(k): check(str(k), v) for k, v in out.items()}
    else:
        raise BadStructure(
            f"output is {type(out).__name__}; return a tensor, a tuple or a dict of tensors"
        )
    structure = {
        "kind": kind,
        "keys": list(tensors),
        "devices": {k: t.device.type for k, t in tensors.items()},
    }
    return structure, tensors


@dataclass
class ProblemRuntime:
    """The problem's reference module and input maker, loaded in a worker."""

    problem: dict[str, Any]
    reference: types.ModuleType
    inputs_module: types.ModuleType
    device: str
    library: types.ModuleType | None = None

    @classmethod
    def load(cls, problem: dict[str, Any], workdir: Path, device: str) -> ProblemRuntime:
        """Write the problem's code into ``workdir`` and import it."""
        ref_path = workdir / "_aka_reference.py"
        ref_path.write_text(problem["reference_code"])
        reference = load_module("_aka_reference", ref_path)
        inputs_module = reference
        if problem.get("inputs_code"):
            inputs_path = workdir / "_aka_inputs.py"
            inputs_path.write_text(problem["inputs_code"])
            inputs_module = load_module("_aka_inputs", inputs_path)
        library = None
        if problem.get("library_code"):
            # Trusted problem code, imported with the reference: before any candidate.
            library_path = workdir / "_aka_library.py"
            library_path.write_text(problem["library_code"])
            library = load_module("_aka_library", library_path)
        return cls(
            problem=problem,
            reference=reference,
            inputs_module=inputs_module,
            device=device,
            library=library,
        )

    @property
    def kernelbench(self) -> bool:
        """Whether the problem uses KernelBench's positional get_inputs/get_init_inputs."""
        return bool(self.problem["input_style"] == "kernelbench")

    def build_model(self, cls: type, shape: dict[str, Any], seed: int) -> Any:
        """Build ``cls`` for ``shape`` under the model seed of ``seed``, on the device."""
        seed_everything(model_seed(seed))
        if self.kernelbench:
            model = cls(*self.reference.get_init_inputs())
        else:
            model = cls(**shape["init_kwargs"])
        return model.to(self.device) if hasattr(model, "to") else model

    def make_inputs(self, shape: dict[str, Any], seed: int) -> tuple[list[Any], dict[str, Any]]:
        """Draw inputs for ``shape`` under the input seed of ``seed``; tensors end on the device."""
        import torch

        seed_everything(input_seed(seed))
        if self.kernelbench:
            args = [
                a.to(self.device) if isinstance(a, torch.Tensor) else a
                for a in self.reference.get_inputs()
            ]
            return args, {}
        fn = getattr(self.inputs_module, self.problem["input_fn"])
        kwargs = dict(shape["input_kwargs"])
        if self.problem["inputs_take_device"]:
            kwargs["device"] = self.device
        made = fn(**kwargs)
        if not isinstance(made, dict):
            raise TypeError(
                f"{self.problem['input_fn']} returned {type(made).__name__}, not a dict"
            )
        return [], {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v for k, v in made.items()
        }


def clone_inputs(args: list[Any], kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    """Deep-copy tensor inputs so every call sees pristine memory."""
    import torch

    def c(v: Any) -> Any:
        return v.clone() if isinstance(v, torch.Tensor) else v

    return [c(a) for a in args], {k: c(v) for k, v in kwargs.items()}


def named_inputs(
    args: list[Any], kwargs: dict[str, Any], forward_params: list[str]
) -> dict[str, Any]:
    """Name positional inputs by forward's parameters (KernelBench) and merge keyword inputs."""
    named = {
        forward_params[i] if i < len(forward_params) else f"arg{i}": a for i, a in enumerate(args)
    }
    named.update(kwargs)
    return named
