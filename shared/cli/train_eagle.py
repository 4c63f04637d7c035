"""`treespec train-eagle`: train an EAGLE-3 (or EAGLE) head for a target, written in the public format."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from treespec.shared.cli.arg_types import non_negative_int, positive_float, positive_int
from treespec.shared.model.store import DEFAULT_MODELS_DIR, models_dir, resolve_model_path

DEFAULT_WORK_DIR = Path("~/.cache/treespec/train-eagle")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "train-eagle",
        help="train an EAGLE-3 / EAGLE head for a target model (self-distilled data)",
        description=(
            "Make self-distillation data with the target itself (it writes the user turns and answers "
            "them through the verifier engine), then train a head with the training-time test. "
            "Both stages resume where an interrupted run stopped. The head is written in the public "
            "format (config.json + model.safetensors), with training.json recording how it was made."
        ),
    )
    parser.add_argument(
        "--target",
        default=None,
        metavar="DIR",
        help=f"the target's HF folder (default: the bundled model in {DEFAULT_MODELS_DIR})",
    )
    parser.add_argument("--format", choices=["eagle3", "eagle"], default="eagle3")
    parser.add_argument("--output", required=True, metavar="DIR", help="where the head is written")
    parser.add_argument(
        "--data-dir",
        default=None,
        metavar="DIR",
        help=f"the training data (default: {DEFAULT_WORK_DIR}/<target>-<format>/data)",
    )
    parser.add_argument("--data-tokens", type=positive_int, default=100_000, help="answer tokens to generate")
    parser.add_argument("--data-batch", type=positive_int, default=32, help="conversations generated at once")
    parser.add_argument("--answer-tokens", type=positive_int, default=256, help="longest generated answer")
    parser.add_argument(
        "--data-dtype",
        choices=["auto", "float32", "bfloat16"],
        default="auto",
        help="the target's dtype while it makes the data (auto: bfloat16 where the CPU has native bf16)",
    )
    parser.add_argument(
        "--soft-labels",
        type=non_negative_int,
        default=16,
        metavar="K",
        help="keep the target's K most likely next tokens per position and train on them (0: greedy only)",
    )
    parser.add_argument(
        "--init-head",
        default=None,
        metavar="DIR",
        help="start from this head (public format; its weights and draft vocabulary), e.g. to go on "
        "training a shipped head on new data; default: a fresh head",
    )
    parser.add_argument(
        "--steps",
        type=non_negative_int,
        default=600,
        help="optimizer steps (0: train nothing, measure the head, e.g. --init-head's, on all the data)",
    )
    parser.add_argument("--batch-tokens", type=positive_int, default=4096, help="tokens per optimizer step")
    parser.add_argument("--lr", type=positive_float, default=5e-4)
    parser.add_argument(
        "--ttt-steps",
        type=positive_int,
        default=None,
        help="unrolled drafting steps (eagle3: 4, eagle: 1)",
    )
    parser.add_argument(
        "--draft-vocab",
        type=positive_int,
        default=None,
        help="EAGLE-3's draft vocabulary size (default: 8192 for a fresh head, --init-head's own for it); "
        "with --init-head, a head holding fewer tokens is grown up to it by the tokens the data generates "
        "that it lacks (most generated first, their lm_head rows from zero), one holding more is kept",
    )
    parser.add_argument("--save-every", type=positive_int, default=50, help="checkpoint every N steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--device",
        default="cpu",
        help="torch device of both stages, the target making the data and the head training (cpu, cuda, "
        "cuda:1; default: cpu)",
    )
    parser.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    import torch

    from treespec.drafter.eagle.head_config import EagleFormat
    from treespec.drafter.eagle.training.run import TrainEagleConfig, run
    from treespec.drafter.eagle.training.trainer import TrainSettings
    from treespec.shared.cli.device import device_problem

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    problem = device_problem(args.device)
    if problem is not None:
        print(f"treespec train-eagle: {problem}", file=sys.stderr)
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    target = resolve_model_path(args.target, models_dir())
    fmt = EagleFormat(args.format)
    output = Path(args.output).expanduser()
    data_dir = (
        Path(args.data_dir).expanduser()
        if args.data_dir
        else DEFAULT_WORK_DIR.expanduser() / f"{target.name}-{fmt.value}" / "data"
    )
    ttt = args.ttt_steps if args.ttt_steps is not None else (4 if fmt is EagleFormat.EAGLE3 else 1)
    settings = TrainSettings(
        output=output,
        steps=args.steps,
        batch_tokens=args.batch_tokens,
        lr=args.lr,
        ttt_steps=ttt,
        save_every=args.save_every,
        seed=args.seed,
        progress=not args.no_progress,
        device=args.device,
    )
    record = run(
        TrainEagleConfig(
            target=target,
            output=output,
            format=fmt,
            data_dir=data_dir,
            data_tokens=args.data_tokens,
            train=settings,
            draft_vocab=args.draft_vocab,
            data_batch=args.data_batch,
            answer_tokens=args.answer_tokens,
            top_k=args.soft_labels,
            data_dtype=args.data_dtype,
            init_head=Path(args.init_head).expanduser() if args.init_head else None,
        )
    )
    print(json.dumps(record, indent=2))
    return 0
