"""Pretraining validation: Megatron-core Llama-style GPT models trained on each extractor's tokens.

- :mod:`dripper.pretrain.config`: typed model presets (``llama-1b``, ``tiny``) and :class:`~dripper.pretrain.config.TrainConfig`;
- :mod:`dripper.pretrain.data`: blended Megatron GPT datasets over ``.bin``/``.idx`` files;
- :mod:`dripper.pretrain.train`: the training loop (torchrun data parallel on GPUs, single process on CPU);
- :mod:`dripper.pretrain.checkpoint`: save, resume, load;
- :mod:`dripper.pretrain.export`: checkpoint to Hugging Face Llama, checked by comparing logits;
- :mod:`dripper.pretrain.cpu_compat`: the Megatron-core monkeypatches the CPU path needs.

Importing this package imports neither torch nor Megatron; the submodules do.
"""

from dripper.pretrain.config import LLAMA_1B, MODEL_PRESETS, TINY, ModelConfig, TrainConfig, get_model_config

__all__ = ["LLAMA_1B", "MODEL_PRESETS", "TINY", "ModelConfig", "TrainConfig", "get_model_config"]
