"""The `vanilla-transformer` console command: train a model, translate with it, publish it, average checkpoints.

    vanilla-transformer train --config multi30k_en_de_cpu --dataset DATA_DIR --output_dir runs/en-de
    vanilla-transformer translate --model runs/en-de < news.en > news.de
    vanilla-transformer translate --model your-name/transformer-en-de --input test.en --output test.de --device cuda
    vanilla-transformer push runs/en-de your-name/transformer-en-de [--private] [--revision BRANCH]
    vanilla-transformer average runs/en-de --last 5 --output runs/en-de/averaged
    vanilla-transformer attention --model runs/en-de "A man is riding a bicycle." --layer 4 --output cross.png
    vanilla-transformer export ctranslate2 runs/en-de runs/en-de-ct2 [--quantization int8]
    vanilla-transformer translate --engine ctranslate2 --model runs/en-de-ct2 < news.en > news.de
    vanilla-transformer score --hypotheses newstest2014.hyp.de --references newstest2014.de --lang de
    vanilla-transformer demo --model runs/en-de [--host 127.0.0.1] [--port 7860] [--share]
    vanilla-transformer demo --model runs/en-de --compare runs/en-de/averaged
    vanilla-transformer demo --model your-name/transformer-en-de --write-space space/ --requirement SPEC

`python -m vanilla_transformer.cli ...` does the same. `vanilla-transformer COMMAND --help` documents every option.

translate reads one sentence per line (UTF-8) and writes one translation per line, in the input order: line i of
the output is the translation of line i of the input, so the files stay aligned. Around that promise:
  * empty (or all-whitespace) lines give empty lines, without running the model;
  * lines are split on "\\n" only (a trailing "\\r" is dropped), never on the other characters Python's
    `splitlines` treats as line breaks, which can occur inside a sentence;
  * a line longer than the model takes (the smaller of the tokenizer's `model_max_length` and the model's
    `max_position_embeddings`) is truncated to that many tokens and translated, with a warning on stderr naming
    the line (numbered from 1): it is never dropped;
  * a line break inside a generated translation (possible with byte-level tokens) is written as a space.
Sentences are translated in batches of similar length (sorted by length, order restored afterwards); decoding is
the model's generation config (its beam size and length penalty, and at most source length + 50 tokens, section 6.1)
unless the decoding options say otherwise (`--beams`, `--length-penalty`, `--length-penalty-form gnmt`: the
paper's penalty, `--max-new-tokens`, `--sample --temperature --top-k --top-p --seed`); `--n-best N` writes N
hypotheses per sentence, one per line: index (from 0), score, text, tab-separated. A progress bar is drawn on stderr
when stderr is a terminal.
`--engine ctranslate2` does the same with a model written by `export ctranslate2` (same tokens as `generate`, about
twice as fast on a CPU; see vanilla_transformer/translation/ctranslate2.py).
"""

from __future__ import annotations

import argparse
import difflib
import logging
import math
import sys
from pathlib import Path

# Only light modules at the top (the standard library, and package modules that import nothing heavy at theirs):
# the parsers are built without torch, transformers or huggingface_hub, so that `--help` answers at once.
from .translation.loading import DTYPES, check_model_location
from .translation.shipped import DEFAULT_MODEL, PRETRAINED_DIR, resolve_model, shipped_models


PROG = "vanilla-transformer"


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser, with its errors on one line (`vanilla-transformer CMD: error: ...`, exit status 2) instead
    of the usage block: the message names the option, and `--help` lists them all."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments" message, with the closest option of the command for each unknown flag."""
    options = [option for action in parser._actions for option in action.option_strings]
    hints = []
    for extra in extras:
        flag = extra.split("=", 1)[0]
        close = difflib.get_close_matches(flag, options, n=1) if flag.startswith("-") else []
        if close:
            hints.append((flag, close[0]))
    message = f"unrecognized arguments: {' '.join(extras)}"
    if len(hints) == 1:
        return f"{message} (did you mean {hints[0][1]}?)"
    if hints:
        return f"{message} (did you mean {', '.join(f'{close} for {flag}' for flag, close in hints)}?)"
    return message


# ------------------------------------------------------------------------------------------------ translate


def read_lines(source: str, option: str = "--input") -> list[str]:
    """The lines of `source` ("-" = stdin) decoded as UTF-8, split on "\\n" only, trailing "\\r" removed; errors
    name `option`, the flag that gave `source`."""
    if source == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
        name = "standard input"
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(
                f"{option} {source!r} is not a file: pass a text file with one sentence per line, or '-' to read "
                f"standard input."
            )
        data, name = path.read_bytes(), source
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{option} {name} is not UTF-8 ({error}): convert it, e.g. `iconv -t UTF-8`.") from None
    if text.startswith("\ufeff"):  # a byte-order mark is not part of the first sentence
        text = text[1:]
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line does not start another one
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def write_lines(target: str, lines: list[str]) -> None:
    """Write one line per item ("-" = stdout), UTF-8, each ended by "\\n"."""
    data = "".join(line.replace("\r", " ").replace("\n", " ") + "\n" for line in lines).encode("utf-8")
    if target == "-":
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:
            sys.stdout.write(data.decode("utf-8"))
        else:
            sys.stdout.flush()
            buffer.write(data)
            buffer.flush()
        return
    path = Path(target)
    if path.parent and not path.parent.is_dir():
        raise ValueError(f"--output {target!r}: the directory {str(path.parent)!r} does not exist; create it first.")
    path.write_bytes(data)


# ------------------------------------------------------------------------------------------------ decoding options

# The length penalty's forms, as the model's generation config names them (`length_penalty_form`; the model code
# defines them: modeling_vanilla_transformer.LENGTH_PENALTY_FORMS, not imported here so that --help stays fast).
PENALTY_FORMS = ("length", "gnmt")
SAMPLING_OPTIONS = (("--temperature", "temperature"), ("--top-k", "top_k"), ("--top-p", "top_p"))


def add_decoding_options(
    parser: argparse.ArgumentParser, *, n_best: bool = False, sampling: bool = True, max_new_tokens: bool = False
) -> None:
    """The decoding options, spelled alike in every command that decodes (`translate`, `attention`, `demo`,
    `export`): each defaults to the model's generation config. Each has its generate / fairseq spelling as an alias."""
    group = parser.add_argument_group("decoding (default: the model's generation config)")
    group.add_argument(
        "--beams",
        "--num-beams",  # generate's and the pipeline's name, written as an option
        "--num_beams",
        "--beam",  # fairseq-generate's and onmt_translate's
        dest="beams",
        type=int,
        default=None,
        metavar="N",
        help="beam size (1 = greedy)",
    )
    group.add_argument(
        "--length-penalty",
        "--length_penalty",
        "--lenpen",  # fairseq-generate's
        dest="length_penalty",
        type=float,
        default=None,
        metavar="ALPHA",
        help="length penalty alpha of beam search (the paper's 0.6; 0 = none)",
    )
    group.add_argument(
        "--length-penalty-form",
        "--length_penalty_form",
        dest="length_penalty_form",
        choices=PENALTY_FORMS,
        default=None,
        help="how the penalty divides a hypothesis' log-probability: length = |Y|**alpha (transformers, fairseq, "
        "CTranslate2); gnmt = ((5+|Y|)/6)**alpha (Wu et al. 2016: the paper's, tensor2tensor, OpenNMT-py wu)",
    )
    if max_new_tokens:
        group.add_argument(
            "--max-new-tokens",
            "--max_new_tokens",
            dest="max_new_tokens",
            type=int,
            default=None,
            metavar="N",
            help="at most N tokens per translation (default: the model's rule, source length + 50)",
        )
    if n_best:
        group.add_argument(
            "--n-best",
            "--n_best",
            "--nbest",  # fairseq-generate's
            dest="n_best",
            type=int,
            default=None,
            metavar="N",
            help="write the N best hypotheses of each sentence with their scores, one per line: the sentence's index "
            "from 0, the score, the text, tab-separated (score: beam search's log P / length penalty; greedy and "
            "sampling: log P); at most the beam size",
        )
    if sampling:
        group.add_argument(
            "--sample",
            "--do-sample",
            "--do_sample",
            dest="sample",
            action="store_true",
            help="sample each token instead of searching (also implied by --temperature, --top-k, --top-p)",
        )
        group.add_argument("--temperature", type=float, default=None, metavar="T", help="sampling temperature (> 0)")
        group.add_argument(
            "--top-k",
            "--top_k",
            dest="top_k",
            type=int,
            default=None,
            metavar="K",
            help="sample from the K most likely tokens (0 = all)",
        )
        group.add_argument(
            "--top-p",
            "--top_p",
            dest="top_p",
            type=float,
            default=None,
            metavar="P",
            help="sample from the smallest set of tokens of probability P (0 < P <= 1)",
        )
        group.add_argument("--seed", type=int, default=None, help="random seed of sampling (reproducible output)")


def decoding_options(args) -> dict:
    """The `generate` options that the decoding flags of `args` set ({} = the model's generation config), checked:
    a bad value or combination is a ValueError naming the flag, before anything is loaded."""
    beams, alpha, form = args.beams, args.length_penalty, args.length_penalty_form
    n_best = getattr(args, "n_best", None)
    if beams is not None and beams < 1:
        raise ValueError(f"--beams must be at least 1, got {beams}.")
    if alpha is not None and not math.isfinite(alpha):
        raise ValueError(f"--length-penalty must be a finite number, got {alpha}.")
    if form == "gnmt" and alpha is not None and alpha < 0:
        raise ValueError(
            f"--length-penalty {alpha} with --length-penalty-form gnmt: the GNMT penalty takes alpha >= 0 "
            "(a negative alpha is for --length-penalty-form length, where it favours shorter hypotheses)."
        )
    if n_best is not None:
        if n_best < 1:
            raise ValueError(f"--n-best must be at least 1, got {n_best}.")
        if beams is not None and n_best > beams:
            raise ValueError(f"--n-best {n_best} is more than --beams {beams}: beam search keeps {beams} hypotheses.")
    max_new_tokens = getattr(args, "max_new_tokens", None)
    if max_new_tokens is not None and max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be at least 1, got {max_new_tokens}.")
    options = {}
    sampling_given = [flag for flag, name in SAMPLING_OPTIONS if getattr(args, name, None) is not None]
    if getattr(args, "sample", False) or sampling_given:
        flag = sampling_given[0] if sampling_given else "--sample"
        for other, value in (
            ("--beams", beams if beams != 1 else None),
            ("--length-penalty", alpha),
            ("--length-penalty-form", form),
        ):
            if value is not None:
                raise ValueError(
                    f"{flag} samples one hypothesis token by token; {other} is for beam search: give one or the other."
                )
        if args.temperature is not None and not args.temperature > 0:
            raise ValueError(f"--temperature must be above 0, got {args.temperature}.")
        if args.top_k is not None and args.top_k < 0:
            raise ValueError(f"--top-k must be 0 (all tokens) or more, got {args.top_k}.")
        if args.top_p is not None and not 0 < args.top_p <= 1:
            raise ValueError(f"--top-p must be in (0, 1], got {args.top_p}.")
        options.update(do_sample=True, num_beams=1)
        for _, name in SAMPLING_OPTIONS:
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
    elif getattr(args, "seed", None) is not None:
        raise ValueError(
            "--seed is for sampling (--sample, --temperature, --top-k, --top-p): search is deterministic."
        )
    for name, value in (("num_beams", beams), ("length_penalty", alpha), ("length_penalty_form", form)):
        if value is not None and name not in options:
            options[name] = value
    if max_new_tokens is not None:
        options["max_new_tokens"] = max_new_tokens
    return options


def check_n_best(n_best: int | None, options: dict, generation_config) -> None:
    """--n-best against the beam the model will search with (the flag's, else its generation config's)."""
    if n_best is None or options.get("do_sample"):
        return
    beams = options.get("num_beams", generation_config.num_beams or 1)
    if n_best > beams:
        raise ValueError(
            f"--n-best {n_best} is more than the beam size {beams} (the model's generation config; --beams sets it): "
            f"beam search keeps {beams} hypotheses."
        )


def apply_decoding(generation_config, options: dict) -> None:
    """Decoding flags into a model's generation config (for the commands that read it: `demo`, `export`)."""
    for name, value in options.items():
        setattr(generation_config, name, value)


def cmd_translate(args) -> int:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}.")
    options = decoding_options(args)
    if args.engine == "ctranslate2":
        return cmd_translate_ctranslate2(args, options)
    if args.compute_type is not None:
        raise ValueError("--compute-type is for --engine ctranslate2; with transformers use --dtype.")
    from .translation.loading import load_model, resolve_device

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
    from .translation.translate import translate

    check_n_best(args.n_best, options, model.generation_config)
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


# ------------------------------------------------------------------------------------------------ ctranslate2


def cmd_translate_ctranslate2(args, options: dict) -> int:
    """`translate --engine ctranslate2`: the same input and output handling, decoding by CTranslate2."""
    from .translation.ctranslate2 import CTranslate2Model, import_ctranslate2, translate_ctranslate2

    for option, value in (("--dtype", args.dtype), ("--revision", args.revision)):
        if value is not None:
            raise ValueError(
                f"{option} is for --engine transformers; an exported CTranslate2 model has its weight "
                f"type fixed at export (--compute-type converts it when loading)."
            )
    if args.trust_remote_code:
        raise ValueError("--trust-remote-code is for --engine transformers: a CTranslate2 model runs no model code.")
    # CTranslate2 has beam search with the length ** alpha penalty and a length limit; what this engine reproduces of
    # `generate` is that (translation/ctranslate2.py), not n-best lists, sampling or the GNMT penalty.
    if options.get("length_penalty_form") == "gnmt":
        raise ValueError(
            "--length-penalty-form gnmt: CTranslate2 has only the length form (|Y| ** alpha); translate with "
            "--engine transformers for the GNMT penalty."
        )
    if args.n_best is not None or options.get("do_sample"):
        flag = "--n-best" if args.n_best is not None else "--sample/--temperature/--top-k/--top-p"
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


def cmd_export_ctranslate2(args) -> int:
    from .translation.ctranslate2 import export_ctranslate2

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


def add_export_parser(commands) -> None:
    from .translation.ctranslate2 import QUANTIZATIONS

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
        "of the model's generation config, for `translate --engine ctranslate2` or any CTranslate2 runtime. Needs the ct2 extra (pip install '.[ct2]' in the clone).",
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


# ------------------------------------------------------------------------------------------------ push, average


def cmd_push(args) -> int:
    from .hub.push import files_to_push, push_run

    files = files_to_push(args.output_dir)  # a wrong OUTPUT_DIR fails here, before the Hub is asked anything
    if args.dry_run:
        for name in files:
            print(name)
        print("README.md")
        return 0
    try:
        url = push_run(
            args.output_dir,
            args.repo_id,
            private=args.private,
            revision=args.revision,
            token=args.token,
            # hub.DEFAULT_COMMIT_MESSAGE when not given (not imported here: huggingface_hub would slow down --help)
            **({"commit_message": args.commit_message} if args.commit_message is not None else {}),
            results=args.results,
            prune=not args.no_prune,
        )
    except ValueError as error:
        # The Hub's answer (a token it refuses, a repo of another namespace): the command ran and failed, which is
        # exit status 1; status 2 is for options and inputs checked before any work.
        print(f"{args.command_parser.prog}: error: {error}", file=sys.stderr)
        return 1
    print(url)
    return 0


# ------------------------------------------------------------------------------------------------ attention


def cmd_attention(args) -> int:
    from .evaluation.attention import (
        DPI,
        attention_weights,
        draw_attention,
        head_indices,
        layer_indices,
        require_matplotlib,
        save_formats,
    )
    from .translation.loading import load_config, load_model

    # Everything that can be checked without the weights is checked first: loading and translating take seconds.
    try:
        require_matplotlib()
    except ImportError as error:
        raise ValueError(str(error)) from None
    options = decoding_options(args)
    if args.target is not None and options:
        raise ValueError("the decoding options are for the model's own translation: --target gives the translation.")
    output = Path(args.output)
    if not output.parent.is_dir():
        raise ValueError(
            f"--output {args.output!r}: the directory {str(output.parent)!r} does not exist; create it first."
        )
    formats = save_formats()
    if output.suffix.lower().removeprefix(".") not in formats:
        raise ValueError(
            f"--output {args.output!r}: the file name must end in a format matplotlib writes: .png, .svg, .pdf "
            f"(or {', '.join('.' + f for f in formats if f not in ('png', 'svg', 'pdf'))})."
        )
    # The layer and head counts are in the config: read without the weights.
    config = load_config(args.model, revision=args.revision, trust_remote_code=args.trust_remote_code)
    side = "encoder" if args.kind == "encoder" else "decoder"  # cross-attention is in the decoder's layers
    for option, value, count, check in (
        ("--layer", args.layer, getattr(config, f"{side}_layers", None), layer_indices),
        ("--heads", args.heads, getattr(config, f"{side}_attention_heads", None), head_indices),
    ):
        if isinstance(count, int):  # a config of another kind names them otherwise: draw_attention checks them then
            try:
                check(count, value)
            except ValueError as error:
                raise ValueError(f"{option} {value}: {error}") from None
    model, tokenizer = load_model(
        args.model, revision=args.revision, device=args.device, trust_remote_code=args.trust_remote_code
    )
    if args.seed is not None:
        import torch

        torch.manual_seed(args.seed)
    weights = attention_weights(model, tokenizer, args.source, args.target, **options)
    draw_attention(weights, args.kind, args.layer, args.heads).savefig(output, dpi=DPI)
    if weights.generated:
        print(f"translation: {weights.translation}")
    print(f"{args.kind} attention drawn in {output}")
    return 0


# ------------------------------------------------------------------------------------------------ score


def cmd_score(args) -> int:
    """BLEU of a translation file against its references: sacreBLEU (the figure this package reports), and with
    `--lang` the paper's tokenized, compound-split BLEU (Table 2's method) beside it."""
    hypotheses, references = (
        read_lines(args.hypotheses, "--hypotheses"),
        read_lines(args.references, "--references"),
    )
    if len(hypotheses) != len(references):
        raise ValueError(
            f"--hypotheses has {len(hypotheses)} lines and --references {len(references)}: line i of one must be "
            f"the translation of line i of the other."
        )
    if not hypotheses:
        raise ValueError("--hypotheses is empty: BLEU needs at least one sentence.")
    from .evaluation.bleu import compute_bleu, paper_style_bleu

    sacre = compute_bleu(hypotheses, references)
    print(f"sacreBLEU        {sacre['score']:.2f}  {sacre['signature']}")
    if args.lang:
        paper = paper_style_bleu(hypotheses, references, args.lang)
        print(f"tokenized BLEU   {paper['score']:.2f}  {paper['method']} (the paper's Table 2)")
    return 0


# ------------------------------------------------------------------------------------------------ demo


def _display_name(model: str) -> str:
    """A shipped model by its short name (its directory is deep in site-packages), any other model as given."""
    return Path(model).name if Path(model).parent == PRETRAINED_DIR else model


def cmd_demo(args) -> int:
    """The web page (vanilla_transformer/demo/, docs/demo.md), or with --write-space a Space that runs it."""
    decoding = decoding_options(args)  # the page's "model default" decoding, and its controls' first values
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535 (0: the first free one from 7860 up), got {args.port}.")
    if not args.host.strip():
        raise ValueError("--host must name an interface, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every one).")
    if args.write_space is not None:
        if args.compare is not None:
            raise ValueError("--compare is for the page served here: --write-space writes a Space for one model.")
        if decoding:
            raise ValueError(
                "the decoding options are for the page served here: a Space decodes as its model's config."
            )
        from .demo import write_space

        path = write_space(args.write_space, args.model, revision=args.revision, requirement=args.requirement)
        print(f"Space written in {path}: upload it with `hf upload --repo-type space NAME {path}`")
        return 0
    if args.requirement is not None:
        raise ValueError("--requirement is for --write-space (the Space's requirements.txt).")
    check_model_location(args.model)  # before gradio, torch and the weights are loaded
    if args.compare is not None:
        check_model_location(args.compare, option="--compare")
    import os

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio  # noqa: F401
    except ImportError:
        # demo.DEMO_HINT's words (the demo package is not imported here: it loads torch)
        raise ValueError(
            "the demo needs gradio: install the demo extra: pip install '.[demo]' in the vanilla-transformer clone "
            "(or pip install gradio)"
        ) from None
    from .demo import VocabularyMismatch, build_demo, launch_demo
    from .translation.loading import load_model

    options = dict(revision=args.revision, device=args.device, trust_remote_code=args.trust_remote_code)
    model, tokenizer = load_model(args.model, **options)
    apply_decoding(model.generation_config, decoding)
    compare = None
    if args.compare is not None:
        model_b, tokenizer_b = load_model(args.compare, **options)
        apply_decoding(model_b.generation_config, decoding)
        compare = (model_b, tokenizer_b, _display_name(args.compare))
    try:
        blocks = build_demo(model, tokenizer, model_name=_display_name(args.model), compare=compare)
    except VocabularyMismatch as mismatch:  # build_demo's check (the only one), told in the command's options
        raise ValueError(
            f"--compare {args.compare!r} has another vocabulary than --model {args.model!r} ({mismatch.difference}): "
            "the two models must share one tokenizer to translate the same tokens."
        ) from None
    launch_demo(blocks, host=args.host, port=args.port or None, share=args.share)
    return 0


# ------------------------------------------------------------------------------------------------ parser


def add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    """The options of every command that loads a checkpoint (`load_model`): which revision, and whether its own code
    may run."""
    parser.add_argument("--revision", default=None, help="branch, tag or commit of a Hub repo (default: main)")
    parser.add_argument(
        "--trust-remote-code",
        action="store_true",
        help="allow running the model code stored in the checkpoint instead of this package's (needed only "
        "for checkpoints whose code this package does not provide)",
    )


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
    t.add_argument("--batch-size", type=int, default=32, metavar="N", help="sentences per batch (default 32)")
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
        "--compute-type",
        default=None,
        metavar="TYPE",
        help="--engine ctranslate2: type to compute in, e.g. int8, float32, bfloat16 (default: the "
        "exported weight type)",
    )
    add_decoding_options(t, n_best=True, max_new_tokens=True)
    add_checkpoint_options(t)
    t.set_defaults(func=cmd_translate, command_parser=t)


def add_push_parser(commands) -> None:
    """`push`: a training run's output directory to the Hub, in one commit."""
    p = commands.add_parser(
        "push",
        help="publish a trained model on the Hugging Face Hub",
        description="Upload a training run's output directory in one commit: weights (safetensors), config with "
        "auto_map, generation config, remote code with the translation pipeline, tokenizer, model card written from "
        "results.json, plots and results.json; never checkpoints, optimizer states, training_args.bin, TensorBoard "
        "runs or hypotheses. The token is checked before anything is uploaded.",
    )
    p.add_argument(
        "output_dir",
        type=resolve_model,
        help="a shipped model's name, `vanilla-transformer train`'s --output_dir, or a save_pretrained directory "
        "holding the tokenizer",
    )
    p.add_argument(
        "repo_id", help="'namespace/name' on the Hub ('name' alone: your own namespace); created if missing"
    )
    p.add_argument(
        "--private", action="store_true", help="create the repo private (an existing public repo is an error)"
    )
    p.add_argument(
        "--revision",
        default=None,
        metavar="BRANCH",
        help="commit to this branch, created from main if missing (default: main)",
    )
    p.add_argument(
        "--token", default=None, help="Hub token with write access (default: HF_TOKEN, else `hf auth login`)"
    )
    p.add_argument(
        "--commit-message",
        default=None,
        # hub.DEFAULT_COMMIT_MESSAGE's words (hub.py is not imported for --help; tests/test_cli.py checks them).
        help="commit title (default: 'Upload model trained with vanilla-transformer')",
    )
    p.add_argument(
        "--results",
        default=None,
        metavar="FILE",
        help="results JSON the model card is written from (default: OUTPUT_DIR/results.json; without one, "
        "an existing README.md is pushed as is, else a card without results)",
    )
    p.add_argument(
        "--no-prune",
        action="store_true",
        help="keep training files (training_args.bin, checkpoints, runs/) "
        "that the Trainer's pushes during training left in the repo; by default the commit deletes them",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="list the files that would be uploaded and exit (no network)"
    )
    p.set_defaults(func=cmd_push, command_parser=p)


def add_attention_parser(commands) -> None:
    """`attention`: a figure of the model's attention weights for one sentence."""
    a = commands.add_parser(
        "attention",
        help="draw what the model attends to (the paper's Figures 3-5) for one sentence",
        description="Translate SOURCE (beam search) or take --target, and draw the model's attention weights into a "
        "PNG: cross-attention as source x target heatmaps (one panel per head and their mean), or encoder / decoder "
        "self-attention as lines between the tokens of the sentence written twice, one colour per head, as in the "
        "paper's appendix. Layers and heads count from 0.",
    )
    a.add_argument("source", metavar="SOURCE", help="the source sentence")
    a.add_argument(
        "--model",
        required=True,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a shipped model's name, a checkpoint directory or a Hub repo id (with its tokenizer)",
    )
    a.add_argument("--output", required=True, metavar="FILE.png", help="where to write the figure (PNG, SVG, PDF)")
    a.add_argument("--target", default=None, help="the translation to analyse (default: the model's own)")
    a.add_argument(
        "--kind",
        default="cross",
        choices=("cross", "encoder", "decoder"),
        help="cross-attention (default), encoder or decoder self-attention",
    )
    a.add_argument(
        "--layer",
        type=int,
        default=None,
        metavar="L",
        help="layer index from 0 (negative: from the last, -1 = last); default: every layer",
    )
    a.add_argument("--heads", default="all", metavar="all|0,3", help="heads to draw: 'all' (default) or indices")
    a.add_argument("--device", default="auto", help="torch device: auto (default), cpu, cuda, mps")
    add_decoding_options(a, max_new_tokens=True)  # for the model's translation (without --target)
    add_checkpoint_options(a)
    a.set_defaults(func=cmd_attention, command_parser=a)


def add_score_parser(commands) -> None:
    """`score`: BLEU of a translation file, sacreBLEU and the paper's tokenized BLEU."""
    s = commands.add_parser(
        "score",
        help="BLEU of a translation file: sacreBLEU, and the paper's tokenized BLEU (--lang)",
        description="Score one translation per line against one reference per line. sacreBLEU (cased, detokenized, "
        "13a) is the figure this package reports; with --lang, also the paper's Table 2 method (Moses tokenizer, "
        "compound words split, multi-bleu.perl: tokenized BLEU), which scores higher and is comparable only with "
        "papers that used it (27.3 / 28.4 on newstest2014 EN-DE).",
    )
    s.add_argument("--hypotheses", required=True, metavar="FILE", help="translations, one per line ('-' = stdin)")
    s.add_argument("--references", required=True, metavar="FILE", help="references, one per line, in the same order")
    s.add_argument(
        "--lang", default=None, metavar="CODE", help="target language (e.g. de): also print the paper-style BLEU"
    )
    s.set_defaults(func=cmd_score, command_parser=s)


def add_demo_parser(commands) -> None:
    """`demo`: the web page of a model (docs/demo.md)."""
    d = commands.add_parser(
        "demo",
        help="a web page that translates and shows attention, beam search steps and word alignment",
        description="Serve a Gradio page for a model: translate what a visitor types (the model's decoding, or "
        "greedy / beam / sampling), with its cross-, encoder and decoder attention per layer and head, the beam "
        "search step by step, and a word alignment read from the cross-attention. Needs the demo extra (pip install "
        "'.[demo]' in the clone). See docs/demo.md.",
    )
    d.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help=f"a shipped model's name (default {DEFAULT_MODEL}), a checkpoint directory or a Hub repo id (with its "
        "tokenizer); with --write-space a Hub repo id",
    )
    d.add_argument(
        "--compare",
        default=None,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a second model shown beside --model (e.g. the averaged model of the same run), loaded with the same "
        "--device, --revision and --trust-remote-code; it must have --model's vocabulary",
    )
    d.add_argument("--host", default="127.0.0.1", help="interface to serve on (default 127.0.0.1: this machine only)")
    d.add_argument("--port", type=int, default=7860, help="port (default 7860; 0 = the first free one from 7860 up)")
    d.add_argument("--share", action="store_true", help="also open a public gradio.live link (Gradio's tunnel)")
    d.add_argument("--device", default="auto", help="torch device: auto (default), cpu, cuda, mps")
    d.add_argument(
        "--write-space",
        default=None,
        metavar="DIR",
        help="write a Hugging Face Space (app.py, requirements.txt, README.md) running this page for the Hub model "
        "--model into DIR, instead of serving",
    )
    d.add_argument(
        "--requirement",
        default=None,
        metavar="SPEC",
        help="with --write-space: the line of the Space's requirements.txt that installs this package, e.g. "
        "'vanilla-transformer[demo] @ git+https://github.com/YOUR_NAME/vanilla-transformer' (default: the same line "
        "with the Repository URL of the package's metadata; required where the metadata records none)",
    )
    add_decoding_options(d, sampling=False)  # the page's "model default" decoding
    add_checkpoint_options(d)
    d.set_defaults(func=cmd_demo, command_parser=d)


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=f"Run `{PROG} COMMAND --help` for the options of a command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    add_translate_parser(commands)
    add_export_parser(commands)
    add_push_parser(commands)
    add_attention_parser(commands)
    add_score_parser(commands)
    add_demo_parser(commands)
    commands.add_parser(
        "train",
        add_help=False,
        help=f"train a model with the paper's recipe; `{PROG} train --help` for its options",
    )
    commands.add_parser(
        "average",
        add_help=False,
        help=f"average the last checkpoints of a run (paper section 6.1); `{PROG} average --help` for its options",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line `argv` (default `sys.argv[1:]`); returns the exit status (0 = success)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["train"]:
        # The training command owns its options (vanilla_transformer/training/command.py); this command only routes to it.
        from .training.command import main as train_main

        return train_main(argv[1:])
    if argv[:1] == ["average"]:
        # The averaging module owns its options; this command only routes to it.
        from .training.averaging import main as average_main

        return average_main(argv[1:], prog=f"{PROG} average")
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # reported by the command's parser, with the closest known option, not by the top level's
        getattr(args, "command_parser", parser).error(unrecognized(getattr(args, "command_parser", parser), extras))
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s: %(message)s")
    from . import register

    register()  # deferred while the arguments were parsed (vanilla_transformer/__init__.py)
    try:
        return args.func(args)
    except ValueError as error:  # an option or input that cannot work, found before (or instead of) the work
        print(f"{args.command_parser.prog}: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
