#!/usr/bin/env bash
# Install aka and its dependencies: the one install script that CI and the Dockerfile both run.
#
# Usage: scripts/install-deps.sh [--gpu] [--no-dev] [--dry-run]
#
#   (default)  CPU dev/CI install: python3 -m pip install -c constraints-cpu.txt -e '.[dev]'.
#              constraints-cpu.txt pins the whole verified stack, torch to its CPU wheel included.
#   --gpu      For a CUDA machine or image: the same pins except torch and triton, which are left to
#              pyproject's ranges so pip takes the CUDA build (PyPI's Linux default, or the index in
#              PIP_INDEX_URL / PIP_EXTRA_INDEX_URL, e.g. https://download.pytorch.org/whl/cu130).
#   --no-dev   Install the project itself, non-editable and without the [dev] extra (Docker).
#   --dry-run  Print the pip command instead of running it.
#
# Environment: PYTHON (default python3) picks the interpreter. Works from any cwd.
set -euo pipefail

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

gpu=0
dev=1
dry_run=0
for arg in "$@"; do
    case "$arg" in
        --gpu) gpu=1 ;;
        --no-dev) dev=0 ;;
        --dry-run) dry_run=1 ;;
        -h | --help)
            usage
            exit 0
            ;;
        *)
            echo "install-deps: unknown option '$arg'" >&2
            usage >&2
            exit 2
            ;;
    esac
done

# Relative paths below (constraints-cpu.txt, '.') are relative to the repository root.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

constraints=constraints-cpu.txt
if ((gpu)); then
    # Keep every pin but torch/triton: the CPU torch wheel must not replace the CUDA one.
    constraints="$(mktemp -t aka-constraints-gpu.XXXXXX)"
    trap 'rm -f "$constraints"' EXIT
    grep -vE '^(torch|triton)==' constraints-cpu.txt >"$constraints"
    echo "install-deps: --gpu: not pinning $(grep -E '^(torch|triton)==' constraints-cpu.txt | tr '\n' ' ')"
fi

if ((dev)); then
    target=(-e '.[dev]')
else
    target=(.)
fi

cmd=("${PYTHON:-python3}" -m pip install -c "$constraints" "${target[@]}")
echo "+ ${cmd[*]}"
if ((!dry_run)); then
    "${cmd[@]}"
fi
