"""The block-sequence CPU labeler: the ``cpu`` trees' scores, block features and hashed tokens, read across
the page by a small bidirectional GRU, evaluated with numpy.

A named option, ``--labeler cpu_seq``, with shipped weights; not the default (out of fold it scored below
the trees alone: docs/cpu-labeler.md). ``dripper train-labeler --kind cpu_seq`` retrains it.

- :mod:`.tokens`: each block's hashed text and markup tokens.
- :mod:`.network`: the network in numpy, its windows over long pages, its ``.npz`` file.
- :mod:`.labeler`: the registered labeler (decision rule and gates as ``cpu``'s).
- :mod:`.dataset`, :mod:`.train`: training pages with tokens, and the torch training (``cpu-train`` extra).

Importing this package loads no model and no torch.
"""
