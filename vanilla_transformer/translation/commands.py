"""The translation commands of `vanilla-transformer`: `translate` (one sentence per line in, one translation per line
out) and `export ctranslate2`, each as its parser beside the function that runs it.

    vanilla-transformer translate --model runs/en-de < news.en > news.de
    vanilla-transformer translate --model runs/en-de-ct2 --engine ctranslate2 --input test.en --output test.de
    vanilla-transformer export ctranslate2 runs/en-de runs/en-de-ct2 [--quantization int8]

The parsers are built without torch (only the standard library and this package's light modules at the top): the
functions import what they run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..arguments import (
    PROG,
    add_checkpoint_options,
    add_decoding_options,
    decoding_options,
    integer,
    read_lines,
    write_lines,
)
from ..generation_vanilla_transformer import check_decoding
from .loading import DTYPES, check_model_location
from .shipped import resolve_model, shipped_models


# ------------------------------------------------------------------------------------------------ translate


def add_translate_parser(commands) -> None:
    """`translate`: one sentence per line in, one translation per line out."""
    t = commands.add_parser(
        "translate",
        help="translate text, one sentence per line",
        description="Translate one sentence per line with a trained model, in batches sorted by length, keeping the "
        "input order and empty lines; an over-long line is truncated to what the model takes, with a warning.",
    )
    t.add_argument(
        "--model",
        required=True,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a shipped model's name ("
        + ", ".join(shipped_models())
        + "), a checkpoint directory (`vanilla-transformer "
        "train`'s --output_dir, averaged/, a checkpoint-N) or a Hub repo id; the tokenizer is loaded from the same place",
    )
    t.add_argument(
        "--input", default="-", metavar="FILE", help="UTF-8 text, one sentence per line; '-' = stdin (default)"
    )
    t.add_argument(
        "--output", default="-", metavar="FILE", help="where to write one translation per line; '-' = stdout (default)"
    )
    t.add_argument("--batch_size", type=integer, default=32, metavar="N", help="sentences per batch (default 32)")
    t.add_argument(
        "--device",
        default="auto",
        help="torch device: auto (default: cuda, else mps, else cpu), cpu, cuda, cuda:1, mps",
    )
    t.add_argument(
        "--dtype",
        default=None,
        choices=DTYPES,
        help="dtype of the weights and computation (default float32; --engine transformers); auto = "
        "bfloat16 where the hardware has it natively (a GPU with bfloat16, a CPU with AVX512_BF16 or AMX), "
        "float32 elsewhere",
    )
    t.add_argument(
        "--engine",
        default="transformers",
        choices=("transformers", "ctranslate2"),
        help="transformers (default: the checkpoint and `generate`) or ctranslate2 (--model is a directory "
        f"written by `{PROG} export ctranslate2`; same translations, faster on CPUs)",
    )
    t.add_argument(
        "--compute_type",
        default=None,
        metavar="TYPE",
        help="--engine ctranslate2: type to compute in, e.g. int8, float32, bfloat16 (default: the "
        "exported weight type)",
    )
    add_decoding_options(t, n_best=True, max_new_tokens=True)
    add_checkpoint_options(t)
    t.set_defaults(func=cmd_translate, command_parser=t)


def cmd_translate(args) -> int:
    options = decoding_options(args)
    if args.engine == "ctranslate2":
        return cmd_translate_ctranslate2(args, options)
    if args.compute_type is not None:
        raise ValueError("--compute_type is for --engine ctranslate2; with transformers use --dtype.")
    from .loading import load_model, resolve_device

    check_model_location(args.model)  # bad options and input fail before torch is imported and the model loaded
    device = resolve_device(args.device)
    lines = read_lines(args.input)
    model, tokenizer = load_model(
        args.model,
        revision=args.revision,
        dtype=args.dtype or "float32",
        device=device,
        trust_remote_code=args.trust_remote_code,
    )
    from .translate import translate

    if args.n_best is not None and not options.get("do_sample"):  # against the beam the model will search with
        beams = options.get("num_beams", model.generation_config.num_beams or 1)
        check_decoding(n_best=args.n_best, num_beams=beams, names={"n_best": "--n_best", "num_beams": "the beam size"})
    if args.seed is not None:
        import torch

        torch.manual_seed(args.seed)
    translations = translate(
        model,
        tokenizer,
        lines,
        batch_size=args.batch_size,
        progress=sys.stderr.isatty(),
        n_best=args.n_best,
        **options,
    )
    if args.n_best is not None:  # one line per hypothesis: index, score, text (fairseq-generate's H- lines' fields)
        translations = [f"{i}\t{score:.6f}\t{text}" for i, hyps in enumerate(translations) for score, text in hyps]
    write_lines(args.output, translations)
    return 0


def cmd_translate_ctranslate2(args, options: dict) -> int:
    """`translate --engine ctranslate2`: the same input and output handling, decoding by CTranslate2."""
    from .ctranslate2 import CTranslate2Model, import_ctranslate2, translate_ctranslate2

    for option, value in (("--dtype", args.dtype), ("--revision", args.revision)):
        if value is not None:
            raise ValueError(
                f"{option} is for --engine transformers; an exported CTranslate2 model has its weight "
                f"type fixed at export (--compute_type converts it when loading)."
            )
    if args.trust_remote_code:
        raise ValueError("--trust_remote_code is for --engine transformers: a CTranslate2 model runs no model code.")
    # CTranslate2 has beam search with the length ** alpha penalty and a length limit; what this engine reproduces of
    # `generate` is that (translation/ctranslate2.py), not n-best lists, sampling or the GNMT penalty.
    if options.get("length_penalty_form") == "gnmt":
        raise ValueError(
            "--length_penalty_form gnmt: CTranslate2 has only the length form (|Y| ** alpha); translate with "
            "--engine transformers for the GNMT penalty."
        )
    if args.n_best is not None or options.get("do_sample"):
        flag = "--n_best" if args.n_best is not None else "--sample/--temperature/--top_k/--top_p"
        raise ValueError(f"{flag} is for --engine transformers; --engine ctranslate2 writes the best translation.")
    if args.device not in ("auto", "cpu", "cuda"):
        raise ValueError(f"--device {args.device!r}: CTranslate2 takes auto, cpu or cuda.")
    if not Path(args.model).is_dir():
        raise ValueError(
            f"--model {args.model!r} is not a directory: with --engine ctranslate2 pass the directory "
            f"written by `{PROG} export ctranslate2 MODEL OUTPUT_DIR`."
        )
    lines = read_lines(args.input)
    try:
        ct2 = import_ctranslate2()
    except ImportError as error:
        raise ValueError(str(error)) from None
    device = args.device
    if device == "auto":
        device = "cuda" if ct2.get_cuda_device_count() > 0 else "cpu"
    model = CTranslate2Model(args.model, device=device, compute_type=args.compute_type or "default")
    translations = translate_ctranslate2(
        model,
        lines,
        batch_size=args.batch_size,
        num_beams=options.get("num_beams"),
        length_penalty=options.get("length_penalty"),
        max_new_tokens=options.get("max_new_tokens"),
        progress=sys.stderr.isatty(),
    )
    write_lines(args.output, translations)
    return 0


# ------------------------------------------------------------------------------------------------ export


def add_export_parser(commands) -> None:
    """`export ctranslate2`: the model in CTranslate2's format, with its tokenizer and decoding settings."""
    from .ctranslate2 import QUANTIZATIONS  # a light module at its top: the engine is imported when used

    export = commands.add_parser(
        "export",
        help="write a trained model in another engine's format (ctranslate2)",
        description="Write a trained model in the format of another inference engine.",
    )
    formats = export.add_subparsers(dest="format", metavar="FORMAT", required=True)
    c = formats.add_parser(
        "ctranslate2",
        help="CTranslate2 (OpenNMT, Argos Translate / LibreTranslate): ~2x faster CPU decoding",
        description="Write the model as a CTranslate2 model directory, with its tokenizer and the decoding settings "
        "of the model's generation config, for `translate --engine ctranslate2` or any CTranslate2 runtime. Needs "
        "the ct2 extra (pip install '.[ct2]' in the clone).",
    )
    c.add_argument(
        "model",
        type=resolve_model,
        metavar="MODEL_DIR_OR_REPO",
        help="a shipped model's name, a checkpoint directory (`vanilla-transformer train`'s --output_dir, averaged/, a "
        "checkpoint-N) or a Hub repo id, with its tokenizer",
    )
    c.add_argument("output_dir", metavar="OUTPUT_DIR", help="directory to write (must not exist, unless --force)")
    c.add_argument(
        "--quantization",
        default="float32",
        choices=QUANTIZATIONS,
        help="weight type stored (default float32; int8 is ~4x smaller and faster on CPUs)",
    )
    c.add_argument("--force", action="store_true", help="replace OUTPUT_DIR if it exists")
    add_decoding_options(c, sampling=False)  # the decoding settings written with the model
    add_checkpoint_options(c)
    c.set_defaults(func=cmd_export_ctranslate2, command_parser=c)


def cmd_export_ctranslate2(args) -> int:
    from .ctranslate2 import export_ctranslate2

    options = decoding_options(args)
    check_model_location(args.model, option="MODEL_DIR_OR_REPO")  # before ctranslate2 and torch are imported
    try:
        path = export_ctranslate2(
            args.model,
            args.output_dir,
            quantization=args.quantization,
            force=args.force,
            revision=args.revision,
            trust_remote_code=args.trust_remote_code,
            decoding=options,
        )
    except ImportError as error:
        raise ValueError(str(error)) from None
    print(path)
    return 0
