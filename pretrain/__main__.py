"""``python -m pretrain`` (see :mod:`pretrain.cli`)."""

import sys

from pretrain.cli import main

if __name__ == "__main__":
    sys.exit(main())
