"""``python -m eval`` runs the extraction benchmark (same options as ``python -m eval.extraction``)."""

import sys

from eval.extraction import main

if __name__ == "__main__":
    sys.exit(main())
