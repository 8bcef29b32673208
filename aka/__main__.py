"""``python -m aka``: the same as the ``aka`` console script."""

import sys

from aka.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
