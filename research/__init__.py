"""Studies that answered a question about Dripper; their conclusions are in the docs.

Unlike ``bench/`` (benchmarks that print ratios against a reference in one run), each module here is a
study: it answered a question (is a training change a real gain, where the CPU labeler goes wrong, would a
learned page gate beat the expected-F1 cut, what the oracle's ceiling is, how the CPU labeler scores out
of fold beside the baselines), and its conclusion is written down in the docs (``docs/benchmarks.md``,
"Research studies", says where). The code stays so the question can be asked again. Run a study from the
repository root with ``python -m research.<name>`` (e.g. ``.venv/bin/python -m research.labeler_sweep
--help``). The package is not installed with ``dripper``; it imports only ``dripper``'s public names.
"""
