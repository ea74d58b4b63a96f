"""``python -m dripper.pretrain`` (see :mod:`dripper.pretrain.cli`)."""

import sys

from dripper.pretrain.cli import main

if __name__ == "__main__":
    sys.exit(main())
