"""Entry point of a scorer worker process: ``python -m aka.bench._worker_main WORKDIR``.

Kept apart from ``aka.bench.worker`` so that module is imported once, under its own name.
"""

from __future__ import annotations

import os
import sys

from aka.bench.worker import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: a candidate's atexit hooks must not run after us
