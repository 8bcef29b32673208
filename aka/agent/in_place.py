"""The in-place check of the kernel adapter: a kernel's in-place writes against a problem's.

Owns reading which launcher tensors a kernel header says it updates in place, and comparing them
with the problem's ``in_place`` list under one mapping of the problem's tensors. A mismatch is
refused before any timing, by name, instead of surfacing late as the scorer's ``mutated_input``
or a stale ``in_place:`` output; the adapter never bridges it with a clone or a copy, which would
be torch compute on the timed path. Pure: no torch, no files.
"""

from __future__ import annotations

from collections.abc import Mapping

from aka.bench import InputSignature
from aka.spec import KernelMeta
from aka.spec.kernel_meta import TensorArgSpec

__all__ = ["in_place_mismatch", "written_in_place"]


def written_in_place(meta: KernelMeta) -> dict[str, str]:
    """Launcher tensor parameters the kernel updates in place -> where its header says so.

    Two places declare it: a ``returns`` entry with ``alias:`` (the parameter itself, returned
    updated), and the own problem's ``problem.in_place`` (reference() parameters it updates,
    which the launcher mirrors: a state updated in place and not returned, say).
    """
    written = {
        out.alias: f"`alias: {out.alias}` in its header's returns"
        for out in meta.returns
        if out.alias is not None
    }
    for name in meta.problem.in_place if meta.problem else []:
        if isinstance(meta.args.get(name), TensorArgSpec):
            written.setdefault(name, "its header's problem.in_place")
    return written


def in_place_mismatch(
    meta: KernelMeta, signature: InputSignature, sources: Mapping[str, str | None]
) -> str | None:
    """Why the kernel's in-place writes differ from the problem's ``in_place``; None if they agree.

    Each tensor the kernel writes in place (``written_in_place``) must be one the problem
    declares, and each declared tensor the kernel receives must be one it writes.

    Args:
        meta: The kernel's header.
        signature: The problem's input signature (its ``in_place`` list included).
        sources: Launcher tensor parameter -> the problem tensor a mapping passes to it (None:
            left out).

    Returns:
        A message naming the problem, the kernel, the tensor and what to do; None when they agree.
    """
    problem = f"problem '{signature.problem_name}'"
    declared = f"in_place: {list(signature.in_place) or '[] (none)'}"
    written: dict[str, str] = {}  # problem tensor -> launcher parameter
    declared_by = written_in_place(meta)
    for param in declared_by:
        if sources.get(param) is not None:
            written[str(sources[param])] = param
    for src, param in written.items():
        if src not in signature.in_place:
            return (
                f"in-place mismatch: {meta.id} writes {problem}'s input '{src}' in place (launcher "
                f"parameter '{param}', {declared_by[param]}), but the problem declares "
                f"{declared}; the scorer would reject the candidate as mutated_input. Use a "
                f"kernel that returns new tensors, or add '{src}' to the problem's in_place if "
                "its operator really updates that input"
            )
    given = {str(src): k for k, src in sources.items() if src is not None}
    for src in signature.in_place:
        if src in given and src not in written:
            param = given[src]
            return (
                f"in-place mismatch: {problem} updates its input '{src}' in place ({declared}), "
                f"but {meta.id}'s header declares no in-place write of launcher parameter "
                f"'{param}' (no `alias: {param}` in its returns, not in its problem.in_place), "
                f"so '{src}' would stay stale. Use an in-place kernel, or declare the write in "
                f"the header if {meta.launcher}() does update '{param}'"
            )
    return None
