"""The run directory the finalize node writes: the kernel, the reports, the record, the artifacts.

Layout of ``<out>/``::

    kernel.py      the incumbent, its module docstring replaced by a KernelMeta header
                   (``status: candidate``, ``measured:`` from the final GPU results)
    report.md      the run summary, per-shape tables, decisions, dropouts and candidates
    report.html    the same, self-contained (inline CSS and SVG charts, no script, no assets)
    run.json       ``RunRecord`` as JSON: enough to audit every decision and re-render both reports
    artifacts/     prompts, replies, candidate files... (names relative to this folder)

Every file is written to a temporary file beside its target and renamed over it, so a killed
process leaves either the old file or the new one, never half of one. Candidate messages, origins
and families come from proposers (an LLM among them) and are untrusted: every text is escaped for
the format it lands in. ``render_markdown``, ``render_html`` and ``build_kernel_file`` are public so
the service can render the same documents from a stored ``run.json``.

This module owns the directory itself (``write_run_dir``, ``RunPaths``, atomic writes, artifact
names); the documents are rendered by ``report_markdown``, ``report_html`` and ``report_kernel``
(rows shared by both reports live in ``report_data``), and their public names are re-exported here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

from aka.agent.records import RunRecord
from aka.agent.report_html import render_html
from aka.agent.report_kernel import build_kernel_file, normalize_dtype, problem_dtypes
from aka.agent.report_markdown import render_markdown
from aka.agent.runtime import atomic_write
from aka.core.errors import AgentError

__all__ = [
    "RunPaths",
    "build_kernel_file",
    "normalize_dtype",
    "problem_dtypes",
    "render_html",
    "render_markdown",
    "write_run_dir",
]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunPaths:
    """The files ``write_run_dir`` wrote.

    Attributes:
        root: The run directory.
        run_json: ``run.json``.
        report_md: ``report.md``.
        report_html: ``report.html``.
        kernel: ``kernel.py``; None when no kernel source was given (no correct kernel).
        artifacts: Every file written under ``artifacts/``, in the order given.
    """

    root: Path
    run_json: Path
    report_md: Path
    report_html: Path
    kernel: Path | None
    artifacts: tuple[Path, ...]


# --------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------


def write_run_dir(
    out: Path,
    record: RunRecord,
    *,
    kernel_source: str | None,
    artifacts: Mapping[str, str] | None = None,
    dtypes: Mapping[str, str] | None = None,
) -> RunPaths:
    """Write a run directory (see the module docstring for its layout).

    Everything is rendered and every artifact name checked before the first file is written, so
    a bad name or an unparsable kernel leaves the directory as it was.

    Args:
        out: The run directory; created if missing.
        record: The finished run.
        kernel_source: The incumbent's source; None when the run found no correct kernel (then no
            ``kernel.py`` is written).
        artifacts: Relative name (``prompts/c1_0.md``) to text, written under ``artifacts/``.
        dtypes: Shape id to dtype name for the kernel header (see ``build_kernel_file``).

    Returns:
        The paths written.

    Raises:
        AgentError: An artifact name escapes ``artifacts/`` (absolute, ``..``, empty), or the kernel
            source does not parse.
    """
    root = Path(out)
    artifact_root = root / "artifacts"
    targets = _artifact_targets(artifact_root, artifacts or {})
    kernel_text = (
        build_kernel_file(record, kernel_source, dtypes=dtypes)
        if kernel_source is not None
        else None
    )
    markdown = render_markdown(record)
    page = render_html(record)
    run_json = record.model_dump_json(indent=2) + "\n"

    root.mkdir(parents=True, exist_ok=True)
    for path, text in targets:
        atomic_write(path, text)
    kernel_path: Path | None = None
    if kernel_text is not None:
        kernel_path = root / "kernel.py"
        atomic_write(kernel_path, kernel_text)
    paths = RunPaths(
        root=root,
        run_json=root / "run.json",
        report_md=root / "report.md",
        report_html=root / "report.html",
        kernel=kernel_path,
        artifacts=tuple(path for path, _ in targets),
    )
    atomic_write(paths.report_md, markdown)
    atomic_write(paths.report_html, page)
    atomic_write(paths.run_json, run_json)  # last: its presence means the directory is complete
    logger.info(
        "run %s written to %s (%d artifacts, kernel: %s)",
        record.run_id,
        root,
        len(targets),
        "yes" if kernel_path else "none",
    )
    return paths


def _artifact_targets(root: Path, artifacts: Mapping[str, str]) -> list[tuple[Path, str]]:
    """Map artifact names to paths under ``root``, rejecting any name that would leave it."""
    targets: list[tuple[Path, str]] = []
    resolved_root = root.resolve()
    for name, text in artifacts.items():
        posix = PurePosixPath(name.replace("\\", "/"))
        parts = [p for p in posix.parts if p not in ("", ".")]
        escapes = (
            not name.strip()
            or "\x00" in name
            or posix.is_absolute()
            or bool(PureWindowsPath(name).drive)
            or ".." in parts
            or not parts
        )
        target = root.joinpath(*parts) if parts else root
        if not escapes:
            # a symlink already inside artifacts/ must not lead out of it either
            escapes = not target.resolve().is_relative_to(resolved_root)
        if escapes:
            raise AgentError(
                f"artifact name {name!r} does not stay inside the run directory's artifacts/ "
                "folder; give a relative path without '..', e.g. 'prompts/c1_0.md'",
                code="agent.artifact_path",
            )
        targets.append((target, text))
    paths = {path for path, _ in targets}
    for path, _ in targets:
        clash = next((parent for parent in path.parents if parent in paths), None)
        if clash is not None:
            raise AgentError(
                f"artifact {str(clash.relative_to(root))!r} is a file but "
                f"{str(path.relative_to(root))!r} needs it to be a folder; rename one of them",
                code="agent.artifact_path",
            )
    return targets
