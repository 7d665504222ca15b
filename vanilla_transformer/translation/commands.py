"""The translation commands of `vanilla-transformer`: `translate` (one sentence per line in, one translation per line
out) and `export ctranslate2`, each as its parser beside the function that runs it.

    vanilla-transformer translate --model runs/en-de < news.en > news.de
    vanilla-transformer translate --model runs/en-de-ct2 --engine ctranslate2 --input test.en --output test.de
    vanilla-transformer export ctranslate2 runs/en-de runs/en-de-ct2 [--quantization int8]

The parsers are built without torch (only the standard library and this package's light modules at the top): the
functions import what they run.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

from ..arguments import (
    PROG,
    add_checkpoint_options,
    add_decoding_options,
    check_input,
    check_output,
    check_text,
    decoding_options,
    integer,
    iter_lines,
    line_writer,
    partial_path,
    positive_int,
)
from .loading import DTYPES, check_model_location
from .shipped import resolve_model, shipped_models


# ------------------------------------------------------------------------------------------------ translate


def add_translate_parser(commands) -> None:
    """`translate`: one sentence per line in, one translation per line out."""
    t = commands.add_parser(
        "translate",
        help="translate text, one sentence per line",
        description="Translate one sentence per line with a trained model, line i of the output translating line i of "
        "the input, written --window lines at a time (docs/sharing.md).",
    )
    t.add_argument(
        "--model",
        required=True,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a shipped model's name ("
        + ", ".join(shipped_models())
        + "), a checkpoint directory (train's --output_dir, averaged/, a checkpoint-N) or a Hub repo id, with its "
        "tokenizer",
    )
    t.add_argument(
        "--input", default="-", metavar="FILE", help="UTF-8 text, one sentence per line; '-' = stdin (default)"
    )
    t.add_argument(
        "--output", default="-", metavar="FILE", help="where to write one translation per line; '-' = stdout (default)"
    )
    t.add_argument(
        "--all_or_nothing",
        action="store_true",
        help="keep nothing of a run that stops part-way (default: --output FILE.partial keeps the lines it "
        "translated; FILE itself is written only when every line is)",
    )
    t.add_argument("--batch_size", type=integer, default=32, metavar="N", help="sentences per batch (default 32)")
    t.add_argument(
        "--window",
        type=positive_int,
        default=1024,
        metavar="N",
        help="lines sorted by length and translated before they are written (default 1024): more means less padding, "
        "fewer the first lines sooner",
    )
    t.add_argument(
        "--device",
        default="auto",
        help="torch device: auto (default: cuda, else mps, else cpu), cpu, cuda, cuda:1, mps",
    )
    t.add_argument(
        "--dtype",
        default=None,
        choices=DTYPES,
        help="dtype of the weights and computation with --engine transformers (default float32); auto: bfloat16 where "
        "the hardware has it natively, else float32",
    )
    t.add_argument(
        "--engine",
        default="transformers",
        choices=("transformers", "ctranslate2"),
        help=f"transformers (default) or ctranslate2: --model is then a directory written by `{PROG} export "
        "ctranslate2` (same translations, faster on CPUs)",
    )
    t.add_argument(
        "--compute_type",
        default=None,
        metavar="TYPE",
        help="with --engine ctranslate2, the type to compute in, e.g. int8 (default: the exported weight type)",
    )
    add_decoding_options(t, n_best=True, max_new_tokens=True)
    add_checkpoint_options(t)
    t.set_defaults(func=cmd_translate, check=check_translate, command_parser=t)


def check_translate(args) -> tuple[dict, int | None]:
    """The checks of `translate` that need only its options and the file system, run before torch is imported: the
    model's location, the input file (every line UTF-8), the output (a file that can be written), the options of the
    other engine. Returns the decoding options (`decoding_options`) and the input file's number of lines (None for
    standard input or a pipe), which `cmd_translate` is handed."""
    options = decoding_options(args)  # the options alone first, then the files
    if args.engine == "ctranslate2":
        for option, value in (("--dtype", args.dtype), ("--revision", args.revision)):
            if value is not None:
                raise ValueError(
                    f"{option} is for --engine transformers; an exported CTranslate2 model has its weight "
                    f"type fixed at export (--compute_type converts it when loading)."
                )
        if args.trust_remote_code:
            raise ValueError(
                "--trust_remote_code is for --engine transformers: a CTranslate2 model runs no model code."
            )
        if args.device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"--device {args.device!r}: CTranslate2 takes auto, cpu or cuda.")
    else:
        if args.compute_type is not None:
            raise ValueError("--compute_type is for --engine ctranslate2; with transformers use --dtype.")
        check_model_location(args.model)
    check_input(args.input)
    check_output(args.output, source=args.input)
    if args.all_or_nothing and args.output == "-":
        raise ValueError("--all_or_nothing is for --output FILE: standard output is written as it goes.")
    return options, check_text(args.input)  # the whole file, in blocks; standard input is checked as it is read


def _input_lines(args):
    """The input's lines, read lazily; or the exit status where there is nothing to translate: 0 for an empty input
    (written as an empty --output, and said in one line), 130 for Ctrl-C while waiting for it. The first line is
    read here, before the model loads: standard input is waited for, and a first line that is not UTF-8 fails
    before any loading."""
    lines = iter_lines(args.input)
    try:
        first = next(lines, None)
    except KeyboardInterrupt:
        print(f"{PROG} translate: interrupted before the first line was read; nothing is written.", file=sys.stderr)
        return 130
    if first is not None:
        return itertools.chain([first], lines)
    with line_writer(args.output):
        pass
    source = "standard input" if args.input == "-" else f"--input {args.input}"
    written = "" if args.output == "-" else f"; {args.output} is written, empty"
    print(f"{PROG} translate: {source} is empty: nothing to translate{written}.", file=sys.stderr)
    return 0


def _kept(args, done: int) -> str:
    """Where a run that stopped part-way left the translations it finished, and where the rest starts."""
    partial = partial_path(args.output)
    if done == 0:
        if partial is not None:
            partial.unlink(missing_ok=True)
        return (
            f"no line was translated; {args.output} is left as it was"
            if args.output != "-"
            else "no line was translated"
        )
    rest = f"the rest starts at line {done + 1} of the input" + (
        f" (`tail -n +{done + 1} {args.input}`)" if args.input != "-" else ""
    )
    if args.output == "-":
        return f"the translations of the first {done} lines went to standard output; {rest}"
    if partial is None:  # /dev/null, a FIFO: written directly
        return f"the translations of the first {done} lines went to {args.output}; {rest}"
    if args.all_or_nothing:
        return f"{args.output} is left as it was, and nothing of this run is kept (--all_or_nothing)"
    left = "is left as it was" if Path(args.output).exists() else "is not written"
    return f"the translations of the first {done} lines are in {partial}, and {args.output} {left}; {rest}"


def _write_translations(args, translated) -> int:
    """Write each window of `translated` ((index of its first line, its translations), `translate_stream`'s) as it
    comes, flushed: to --output FILE.partial, renamed to FILE once every line is written (`line_writer`), so that an
    existing FILE is only ever replaced by a complete output. A run that stops part-way says in one line where the
    finished lines are (FILE.partial, a prefix of the full output line for line) and where the rest starts: Ctrl-C
    with exit status 130, a line of the input that is not UTF-8 as the error (exit status 2). With --n_best, one line
    says how many sentences have fewer distinct translations than asked."""
    done, fewer = 0, 0  # input lines whose translations are written; sentences with fewer than --n_best hypotheses
    try:
        with line_writer(args.output, keep_partial=not args.all_or_nothing) as write:
            for start, translations in translated:
                count = len(translations)
                if args.n_best is not None:  # one line per hypothesis: index, score, text (fairseq-generate's H-)
                    fewer += sum(len(hyps) < args.n_best and hyps != [(0.0, "")] for hyps in translations)  # not blank
                    translations = [
                        f"{start + i}\t{score:.6f}\t{text}"
                        for i, hyps in enumerate(translations)
                        for score, text in hyps
                    ]
                write(translations)
                done = start + count
    except KeyboardInterrupt:
        print(f"{PROG} translate: interrupted; {_kept(args, done)}.", file=sys.stderr)
        return 130
    except ValueError as error:  # the input part-way: one line, the error and where the rest stopped
        raise ValueError(f"{str(error).rstrip('.')}; {_kept(args, done)}.") from None
    except BaseException:
        print(f"{PROG} translate: stopped by the error below; {_kept(args, done)}.", file=sys.stderr)
        raise
    if fewer:
        print(
            f"{PROG} translate: --n_best {args.n_best}: {fewer} of {done} sentences have fewer distinct translations "
            f"among the hypotheses searched: they have fewer lines (a larger --num_beams searches more).",
            file=sys.stderr,
        )
    return 0


def cmd_translate(args, checked: tuple[dict, int | None]) -> int:
    """`checked`: what `check_translate` returned for `args` (`commands.main` runs it before torch loads)."""
    options, total = checked
    if args.engine == "ctranslate2":
        return cmd_translate_ctranslate2(args, options, total)
    from .loading import load_model, resolve_device

    device = resolve_device(args.device)  # a device this machine lacks is said before standard input is waited for
    lines = _input_lines(args)
    if isinstance(lines, int):  # nothing to translate
        return lines
    model, tokenizer = load_model(
        args.model,
        revision=args.revision,
        dtype=args.dtype or "float32",
        device=device,
        trust_remote_code=args.trust_remote_code,
    )
    from .translate import translate_stream

    if args.seed is not None:
        import torch

        torch.manual_seed(args.seed)
    translated = translate_stream(
        model,
        tokenizer,
        lines,
        window=args.window,
        batch_size=args.batch_size,
        progress=sys.stderr.isatty() and not args.quiet,
        total=total,
        n_best=args.n_best,
        # --n_best against the beam the model searches with, once: the flags were checked before the model loaded
        names={"batch_size": "--batch_size", "n_best": "--n_best", "num_beams": "the beam size"},
        **options,
    )
    return _write_translations(args, translated)


def cmd_translate_ctranslate2(args, options: dict, total: int | None) -> int:
    """`translate --engine ctranslate2`: the same input and output handling, decoding by CTranslate2."""
    from .ctranslate2 import CTranslate2Model, import_ctranslate2, translate_ctranslate2

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
    if not Path(args.model).is_dir():
        raise ValueError(
            f"--model {args.model!r} is not a directory: with --engine ctranslate2 pass the directory "
            f"written by `{PROG} export ctranslate2 MODEL OUTPUT_DIR`."
        )
    lines = _input_lines(args)
    if isinstance(lines, int):  # nothing to translate
        return lines
    try:
        ct2 = import_ctranslate2()
    except ImportError as error:
        raise ValueError(str(error)) from None
    device = args.device
    if device == "auto":
        device = "cuda" if ct2.get_cuda_device_count() > 0 else "cpu"
    model = CTranslate2Model(args.model, device=device, compute_type=args.compute_type or "default")
    from tqdm.auto import tqdm

    from .translate import windows

    def translated():  # window by window, as translate_stream does with the PyTorch model
        progress = sys.stderr.isatty() and not args.quiet
        with tqdm(total=total, desc="translate", unit="sent", disable=not progress) as bar:
            for start, chunk in windows(lines, args.window):
                yield (
                    start,
                    translate_ctranslate2(
                        model,
                        chunk,
                        batch_size=args.batch_size,
                        num_beams=options.get("num_beams"),
                        length_penalty=options.get("length_penalty"),
                        max_new_tokens=options.get("max_new_tokens"),
                        progress=bar,
                        start=start,
                    ),
                )

    return _write_translations(args, translated())


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
        description="Write the model, its tokenizer and its decoding settings as a CTranslate2 model directory, for "
        "`translate --engine ctranslate2` or any CTranslate2 runtime (the ct2 extra; docs/sharing.md).",
    )
    c.add_argument(
        "model",
        type=resolve_model,
        metavar="MODEL_DIR_OR_REPO",
        help="a shipped model's name, a checkpoint directory (train's --output_dir, averaged/, a checkpoint-N) or a "
        "Hub repo id, with its tokenizer",
    )
    c.add_argument(
        "output_dir", metavar="OUTPUT_DIR", help="directory to write (new or empty; one with files only with --force)"
    )
    c.add_argument(
        "--quantization",
        default="float32",
        choices=QUANTIZATIONS,
        help="weight type stored (default float32; int8: smaller and faster on CPUs)",
    )
    c.add_argument("--force", action="store_true", help="replace OUTPUT_DIR if it holds files")
    add_decoding_options(c, sampling=False)  # the decoding settings written with the model
    add_checkpoint_options(c)
    c.set_defaults(func=cmd_export_ctranslate2, check=check_export_ctranslate2, command_parser=c)


def check_export_ctranslate2(args) -> dict:
    """The checks of `export ctranslate2` that need only its options and the file system, run before torch is
    imported: the model's location, OUTPUT_DIR (new, empty, or --force), the engine installed. Returns the decoding
    options to write with the model."""
    options = decoding_options(args)  # the options alone first, then the files
    check_model_location(args.model, option="MODEL_DIR_OR_REPO")
    output = Path(args.output_dir)
    if output.exists() and not output.is_dir():
        raise ValueError(f"OUTPUT_DIR {args.output_dir!r} is a file: name a directory to write the model into.")
    if output.is_dir() and any(output.iterdir()) and not args.force:
        raise ValueError(
            f"OUTPUT_DIR {args.output_dir!r} exists and holds files: choose another directory, or pass --force to "
            f"overwrite it."
        )
    if importlib.util.find_spec("ctranslate2") is None:
        from .ctranslate2 import INSTALL_HINT

        raise ValueError(f"CTranslate2 is not installed: {INSTALL_HINT}.")
    return options


def cmd_export_ctranslate2(args, options: dict) -> int:
    """`options`: the decoding options `check_export_ctranslate2` returned."""
    from .ctranslate2 import export_ctranslate2

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
