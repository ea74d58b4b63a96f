"""The CPU labeler (``--labeler cpu``): a shipped gradient-boosted tree model over block features.

- :mod:`.features`: what the model sees of each block (text statistics, links, tag path and class/id
  vocabulary, position, containers, neighbours; language-agnostic).
- :mod:`.model`: the model file (JSON, evaluated with numpy) and the registered ``cpu`` labeler.
- :mod:`.decision`: how block probabilities become labels (a threshold, or each page's expected-F1 cut).
- :mod:`.train`: training pages from the ``oracle`` labels, site-grouped cross-validation, training
  (``dripper train-labeler``); needs LightGBM or scikit-learn, which extraction does not.

Importing this package does not load the model; building the labeler does (once per process and path).
"""

from dripper.labelers.cpu.model import CpuLabeler, CpuModel, default_model_path, load_model

__all__ = ["CpuLabeler", "CpuModel", "default_model_path", "load_model"]
