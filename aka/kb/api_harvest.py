"""The API layer, harvested from the installed Triton and PyTorch: one ``Chunk`` per public symbol.

Owns the list of symbols an agent needs (every public callable of ``triton.language``, the Triton
runtime and testing entry points, the ``torch.cuda`` timing, stream, memory and graph calls) and
turns each into a chunk carrying its signature and docstring. Reading the installed packages, not a
hand-written copy, keeps the layer true to the version the kernels will run against; the version
label lets the index rebuild this layer only when the packages change.

Introspection only: triton and torch are imported inside ``harvest_api_chunks`` (never at module
import, STYLE D3), nothing touches a device, and it works with no GPU and ``TRITON_INTERPRET``
unset.
Must not import chromadb or sentence-transformers.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import re
from collections.abc import Callable
from types import ModuleType

from aka.kb.chunk import Chunk, MetaValue
from aka.kb.schema import Layer

__all__ = ["RUNTIME_API_NAMES", "harvest_api_chunks"]

logger = logging.getLogger(__name__)

#: Triton runtime/testing and PyTorch symbols harvested besides ``triton.language``; names the
#: installed version lacks are skipped.
RUNTIME_API_NAMES: tuple[str, ...] = (
    "triton.jit",
    "triton.autotune",
    "triton.Config",
    "triton.heuristics",
    "triton.cdiv",
    "triton.next_power_of_2",
    "triton.testing.do_bench",
    "triton.testing.do_bench_cudagraph",
    "triton.testing.assert_close",
    "torch.cuda.Event",
    "torch.cuda.Event.record",
    "torch.cuda.Event.elapsed_time",
    "torch.cuda.Event.synchronize",
    "torch.cuda.synchronize",
    "torch.cuda.Stream",
    "torch.cuda.Stream.wait_stream",
    "torch.cuda.current_stream",
    "torch.cuda.stream",
    "torch.cuda.get_device_properties",
    "torch.cuda.max_memory_allocated",
    "torch.cuda.reset_peak_memory_stats",
    "torch.cuda.empty_cache",
    "torch.cuda.CUDAGraph",
    "torch.cuda.CUDAGraph.replay",
    "torch.cuda.graph",
    "torch.library.triton_op",
    "torch.library.wrap_triton",
)

_PACKAGES = ("triton", "torch")
_DOC_CHARS = 1500
_TITLE_CHARS = 120
# Default values print as "<object at 0x7f...>"; the address changes every run.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def harvest_api_chunks() -> tuple[list[Chunk], str]:
    """Harvest one chunk per public API symbol from the installed Triton and PyTorch.

    Returns:
        The chunks, sorted by ``chunk_id``, and a version label such as
        ``"triton-3.7.1+torch-2.13.0"`` (a package that is not installed reads ``<name>-missing``
        and contributes no chunks); the label changes exactly when the harvested packages do.
    """
    modules = {name: _import_or_none(name) for name in _PACKAGES}
    versions = {
        name: str(getattr(module, "__version__", "unknown")) if module else "missing"
        for name, module in modules.items()
    }
    chunks: list[Chunk] = []
    if modules["triton"] is not None:
        language = importlib.import_module("triton.language")
        for attr in sorted(dir(language)):
            obj = getattr(language, attr)
            if not attr.startswith("_") and callable(obj):
                chunks.append(_api_chunk(f"triton.language.{attr}", obj, versions["triton"]))
    for qualname in RUNTIME_API_NAMES:
        package = qualname.split(".", 1)[0]
        obj = _resolve(qualname) if modules[package] is not None else None
        if obj is not None:
            chunks.append(_api_chunk(qualname, obj, versions[package]))
    label = "+".join(f"{name}-{versions[name]}" for name in _PACKAGES)
    logger.debug("harvested %d API symbols (%s)", len(chunks), label)
    return sorted(chunks, key=lambda chunk: chunk.chunk_id), label


def _import_or_none(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        logger.warning("%s is not installed; the API layer will not describe it", name)
        return None


def _resolve(qualname: str) -> object | None:
    """Import the longest importable module prefix of ``qualname``, then walk its attributes."""
    parts = qualname.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        try:
            for attr in parts[split:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def _api_chunk(qualname: str, obj: object, version: str) -> Chunk:
    package = qualname.split(".", 1)[0]
    signature = _signature_text(obj)
    doc = _doc_text(obj)
    alias = qualname.replace("triton.language.", "tl.", 1)
    header = f"{qualname}{signature}"
    lines = [header]
    if alias != qualname:
        lines.append(f"Also written: {alias}")
    lines += ["", doc]
    metadata: dict[str, MetaValue] = {
        "package": package,
        "version": version,
        "dsl": "triton" if package == "triton" else "any",
    }
    return Chunk(
        chunk_id=f"api:{qualname}",
        doc_id=f"api:{qualname}",
        title=header if len(header) <= _TITLE_CHARS else header[: _TITLE_CHARS - 3] + "...",
        layer=Layer.API,
        kind="api",
        text="\n".join(lines),
        source=f"{package}=={version}",
        metadata=metadata,
    )


def _signature_text(obj: object) -> str:
    """Render the call signature without private parameters (``_semantic``) or ``self``.

    ``@triton.jit`` functions are wrappers whose own signature is ``(*args, **kwargs)``; the
    wrapped Python function (``.fn``) carries the real one. Builtins without a signature read
    ``(...)``.
    """
    target = obj
    wrapped = getattr(obj, "fn", None)
    if not inspect.isclass(obj) and callable(wrapped):
        target = wrapped
    try:
        signature = inspect.signature(_as_callable(target))
    except (TypeError, ValueError):
        return "(...)"
    params = [
        param
        for param in signature.parameters.values()
        if not param.name.startswith("_") and param.name != "self"
    ]
    return _ADDRESS.sub("", str(signature.replace(parameters=params)))


def _as_callable(obj: object) -> Callable[..., object]:
    if not callable(obj):
        raise TypeError(f"{obj!r} is not callable")
    return obj


def _doc_text(obj: object) -> str:
    """The cleaned docstring, cut near ``_DOC_CHARS`` at a line break."""
    doc = (inspect.getdoc(obj) or "").strip()
    if not doc:
        return "(no docstring)"
    if len(doc) <= _DOC_CHARS:
        return doc
    cut = doc.rfind("\n", 0, _DOC_CHARS)
    return doc[: cut if cut > _DOC_CHARS // 2 else _DOC_CHARS].rstrip() + "\n[...]"
