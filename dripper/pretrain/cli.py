"""``python -m dripper.pretrain``: train (or resume), export to Hugging Face, make a toy tokenizer and corpus.

Examples::

    # CPU smoke run of the tiny model
    python -m dripper.pretrain toy --text-jsonl data/sample/pages.jsonl.gz --out /tmp/toy
    python -m dripper.pretrain train --out-dir /tmp/run --data /tmp/toy/tokens --tokenizer /tmp/toy/tokenizer \\
        --model tiny --train-steps 20 --device cpu

    # GPUs: 8-way data parallel, 1B model on one extractor's tokens
    torchrun --nproc-per-node 8 -m dripper.pretrain train --out-dir runs/dripper --model llama-1b \\
        --data ROOT/tokens/dripper --tokenizer TOKENIZER_DIR --precision bf16 \\
        --micro-batch-size 8 --global-batch-size 512 --train-steps 60000 --tensor-parallel 1

    python -m dripper.pretrain export --checkpoint runs/dripper --out runs/dripper/hf
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from dripper.pretrain.config import MODEL_PRESETS, TrainConfig

_TRAIN_HELP = {
    "micro_batch_size": "sequences per rank per forward pass",
    "global_batch_size": "sequences per optimizer step over all data-parallel ranks",
    "train_steps": "optimizer steps in total (resuming continues up to this)",
    "save_interval": "checkpoint every N steps (and at the end)",
    "keep_checkpoints": "keep only the newest N checkpoints (0: all)",
    "tensor_parallel": "Megatron tensor-parallel size",
    "pipeline_parallel": "Megatron pipeline-parallel size (GPUs only)",
}


def _add_train_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--out-dir", type=Path, required=True, help="run folder (resumes if it has checkpoints)"
    )
    parser.add_argument(
        "--data",
        action="append",
        required=True,
        help="indexed-dataset prefix or folder of .bin/.idx (repeatable)",
    )
    parser.add_argument(
        "--data-weights",
        type=float,
        nargs="+",
        default=None,
        help="one blend weight per --data (default: by size)",
    )
    parser.add_argument("--tokenizer", type=Path, required=True, help="Hugging Face tokenizer folder")
    parser.add_argument("--model", choices=sorted(MODEL_PRESETS), default="tiny")
    skip = {"out_dir", "data", "data_weights", "tokenizer", "model"}
    for field in fields(TrainConfig):
        if field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        default = field.default
        if field.name == "precision":
            parser.add_argument(flag, choices=["bf16", "fp32"], default=default)
        elif field.name == "device":
            parser.add_argument(flag, choices=["auto", "cpu", "cuda"], default=default)
        elif isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
        elif field.name == "seq_length":
            parser.add_argument(flag, type=int, default=None, help="context length (default: the preset's)")
        elif field.name == "train_tokens":
            parser.add_argument(
                flag,
                type=int,
                default=None,
                help="a token budget: the steps become ceil(tokens / (global batch x seq length))",
            )
        elif field.name == "data_token_limit":
            parser.add_argument(
                flag,
                type=int,
                default=None,
                help="train on a seeded random subset of the data's documents of at most N tokens",
            )
        elif field.name == "exit_at_step":
            parser.add_argument(
                flag, type=int, default=None, help="stop after this step (checkpointed); resume later"
            )
        else:
            parser.add_argument(
                flag,
                type=type(default),
                default=default,
                help=_TRAIN_HELP.get(field.name, "(default: %(default)s)"),
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m dripper.pretrain", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train_parser = sub.add_parser("train", help="train or resume a run (single process, or under torchrun)")
    _add_train_options(train_parser)
    train_parser.add_argument(
        "--export-to",
        type=Path,
        default=None,
        help="then export every checkpoint to EXPORT_TO/iter_XXXXXXX in this process (as `export "
        "--every-checkpoint`; a single process only): one interpreter start fewer per run",
    )

    export_parser = sub.add_parser("export", help="checkpoint -> Hugging Face Llama folder, logits checked")
    export_parser.add_argument("--checkpoint", type=Path, required=True, help="checkpoint or run folder")
    export_parser.add_argument("--out", type=Path, required=True, help="output folder")
    export_parser.add_argument("--tokenizer", type=Path, default=None, help="default: the run's tokenizer")
    export_parser.add_argument("--atol", type=float, default=1e-3, help="largest accepted logit difference")
    export_parser.add_argument("--no-verify", action="store_true", help="skip the logits comparison")
    export_parser.add_argument(
        "--every-checkpoint",
        action="store_true",
        help="export each checkpoint of the run folder to OUT/iter_XXXXXXX (scores over training)",
    )

    toy_parser = sub.add_parser(
        "toy", help="train a small BPE tokenizer and write a token corpus from local text"
    )
    toy_parser.add_argument(
        "--text-jsonl",
        type=Path,
        required=True,
        help="JSONL(.gz) with a text field (e.g. data/sample/pages.jsonl.gz)",
    )
    toy_parser.add_argument(
        "--field", default="ground_truth_text", help="the text field (default: %(default)s)"
    )
    toy_parser.add_argument(
        "--out", type=Path, required=True, help="writes tokenizer/ and tokens/corpus.{bin,idx}"
    )
    toy_parser.add_argument("--vocab-size", type=int, default=512)
    return parser


def _read_texts(path: Path, field: str) -> list[str]:
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as lines:
        return [text for line in lines if line.strip() and (text := json.loads(line).get(field))]


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("megatron").setLevel(logging.WARNING)  # its dataset builder logs every index it reads
    warnings.filterwarnings("ignore", message=".*(Transformer Engine|Apex).*")
    try:
        if args.command == "train":
            from dripper.pretrain.train import train

            if args.export_to is not None and int(os.environ.get("WORLD_SIZE", "1")) > 1:
                raise ValueError("--export-to runs in a single process; under torchrun, export afterwards")
            values = {f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)}
            result = train(TrainConfig(**values))
            summary = {
                "out_dir": str(result.out_dir),
                "start_step": result.start_step,
                "final_step": result.final_step,
                "last_loss": result.losses[-1] if result.losses else None,
                "checkpoint": str(result.checkpoint) if result.checkpoint else None,
                "tokens_per_second": result.tokens_per_second,
            }
            if args.export_to is not None:
                from dripper.pretrain.export import export_every_checkpoint

                summary["export"] = _exported(export_every_checkpoint(result.out_dir, args.export_to))
            print(json.dumps(summary))
        elif args.command == "export":
            from dripper.pretrain.export import export_checkpoint, export_every_checkpoint

            if args.every_checkpoint:
                results = export_every_checkpoint(
                    args.checkpoint,
                    args.out,
                    tokenizer=args.tokenizer,
                    verify=not args.no_verify,
                    atol=args.atol,
                )
            else:
                results = [
                    export_checkpoint(
                        args.checkpoint,
                        args.out,
                        tokenizer=args.tokenizer,
                        verify=not args.no_verify,
                        atol=args.atol,
                    )
                ]
            print(json.dumps(_exported(results)))
        elif args.command == "toy":
            from dripper.pretrain.toy import train_tokenizer, write_corpus

            texts = _read_texts(args.text_jsonl, args.field)
            if not texts:
                raise ValueError(f"{args.text_jsonl}: no non-empty '{args.field}' field")
            tokenizer = train_tokenizer(texts, args.out / "tokenizer", args.vocab_size)
            prefix = write_corpus(texts, tokenizer, args.out / "tokens" / "corpus")
            print(json.dumps({"tokenizer": str(tokenizer), "prefix": str(prefix), "documents": len(texts)}))
    except (FileNotFoundError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        _shutdown_distributed()
    return 0


def _exported(results: Sequence[Any]) -> dict[str, Any]:
    """What ``export`` prints: the last checkpoint's ``out``, ``step`` and logit difference, and every one."""
    exported = [
        {"out": str(r.out_dir), "step": r.step, "max_abs_logit_diff": r.max_abs_logit_diff} for r in results
    ]
    return {**exported[-1], "checkpoints": exported}


def _shutdown_distributed() -> None:
    torch = sys.modules.get("torch")
    if torch is None or not torch.distributed.is_available() or not torch.distributed.is_initialized():
        return
    from megatron.core import parallel_state

    parallel_state.destroy_model_parallel()
    torch.distributed.destroy_process_group()
