"""``python -m dripper.eval`` runs the extraction benchmark (same options as ``python -m dripper.eval.extraction``)."""

import sys

from dripper.eval.extraction import main

if __name__ == "__main__":
    sys.exit(main())
