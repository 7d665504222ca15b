"""The `vanilla-transformer` console command: translate with a trained model, publish one, average checkpoints.

    vanilla-transformer translate --model runs/en-de < news.en > news.de
    vanilla-transformer translate --model your-name/transformer-en-de --input test.en --output test.de --device cuda
    vanilla-transformer push runs/en-de your-name/transformer-en-de [--private] [--revision BRANCH]
    vanilla-transformer average runs/en-de --last 5 --output runs/en-de/averaged
    vanilla-transformer attention --model runs/en-de "A man is riding a bicycle." --layer 4 --output cross.png
    vanilla-transformer export ctranslate2 runs/en-de runs/en-de-ct2 [--quantization int8]
    vanilla-transformer translate --engine ctranslate2 --model runs/en-de-ct2 < news.en > news.de

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
the model's generation config (section 6.1: beam 4, length penalty 0.6, at most source length + 50 tokens) unless
`--beams` / `--max-new-tokens` say otherwise. A progress bar is drawn on stderr when stderr is a terminal.
`--engine ctranslate2` does the same with a model written by `export ctranslate2` (same tokens as `generate`, about
twice as fast on a CPU; see vanilla_transformer/export_ctranslate2.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from .hub import DEFAULT_COMMIT_MESSAGE


logger = logging.getLogger("vanilla_transformer.cli")

PROG = "vanilla-transformer"
DTYPES = ("auto", "float32", "bfloat16", "float16")


# ------------------------------------------------------------------------------------------------ translate


def read_lines(source: str) -> list[str]:
    """The lines of `source` ("-" = stdin) decoded as UTF-8, split on "\\n" only, trailing "\\r" removed."""
    if source == "-":
        data = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
        name = "standard input"
    else:
        path = Path(source)
        if not path.is_file():
            raise ValueError(
                f"--input {source!r} is not a file: pass a text file with one sentence per line, or '-' "
                f"(the default) to read standard input."
            )
        data, name = path.read_bytes(), source
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"--input {name} is not UTF-8 ({error}): convert it, e.g. `iconv -t UTF-8`.") from None
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


def resolve_device(name):
    """A torch.device from `--device` ("auto": cuda, else mps, else cpu); ValueError if it is not usable here."""
    import torch

    if isinstance(name, torch.device):
        return name
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise ValueError(
            f"--device {name!r} is not a torch device ({error}): use auto, cpu, cuda, cuda:1, mps, ..."
        ) from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"--device {name!r} but torch sees no CUDA GPU (torch.cuda.is_available() is False): use "
            f"--device cpu, or install a CUDA build of torch."
        )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"--device {name!r} but MPS is not available on this machine: use --device cpu.")
    return device


def load_model(
    model: str,
    *,
    revision: str | None = None,
    dtype: str = "float32",
    device: str = "auto",
    trust_remote_code: bool = False,
):
    """(model, tokenizer) from a checkpoint directory or Hub repo, through the Auto classes, on `device`, eval mode.

    Importing this package registers its classes, so its own checkpoints load without remote code;
    `trust_remote_code=True` is needed only for a checkpoint whose code differs from the installed package's
    (it is never asked for interactively: without it such a checkpoint is an error).
    """
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from . import register
    from .precision import fast_attention_implementation, resolve_dtype

    register()  # the config and model with the Auto classes (deferred when the command line started the process)
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of {list(DTYPES)}.")
    target = resolve_device(device)
    torch_dtype, reason = resolve_dtype(dtype, target)
    logger.info("dtype %s (%s)", str(torch_dtype).removeprefix("torch."), reason)
    # bfloat16 on a CPU: the eager attention is the fast kernel there (see precision.fast_attention_implementation).
    attention = fast_attention_implementation(target, torch_dtype)
    try:
        tokenizer = AutoTokenizer.from_pretrained(model, revision=revision, trust_remote_code=trust_remote_code)
        seq2seq = AutoModelForSeq2SeqLM.from_pretrained(
            model,
            revision=revision,
            dtype=torch_dtype,
            trust_remote_code=trust_remote_code,
            **({"attn_implementation": attention} if attention else {}),
        )
    except (OSError, ValueError) as error:  # a missing path, a repo that does not exist, a malformed id, ...
        if "trust_remote_code" in str(error):
            raise ValueError(
                f"--model {model!r} needs its own code, which this package does not provide: add --trust-remote-code "
                f"if you trust the code of that checkpoint (read its .py files first)."
            ) from None
        raise ValueError(
            f"--model {model!r} could not be loaded ({type(error).__name__}: {error}): pass a directory written by "
            f"train.py or "
            f"`save_pretrained` (with the tokenizer saved beside the model), or a Hub repo id such as "
            f"'your-name/transformer-en-de' (with --revision for a branch)."
        ) from None
    return seq2seq.to(target).eval(), tokenizer


def cmd_translate(args) -> int:
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be at least 1, got {args.batch_size}.")
    if args.beams is not None and args.beams < 1:
        raise ValueError(f"--beams must be at least 1, got {args.beams}.")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}.")
    if args.engine == "ctranslate2":
        return cmd_translate_ctranslate2(args)
    if args.compute_type is not None:
        raise ValueError("--compute-type is for --engine ctranslate2; with transformers use --dtype.")
    device = resolve_device(args.device)
    lines = read_lines(args.input)  # bad options and input fail before the model is loaded
    model, tokenizer = load_model(
        args.model,
        revision=args.revision,
        dtype=args.dtype or "float32",
        device=device,
        trust_remote_code=args.trust_remote_code,
    )
    from .translate import translate

    generate_kwargs = {}
    if args.beams is not None:
        generate_kwargs["num_beams"] = args.beams
    if args.max_new_tokens is not None:
        generate_kwargs["max_new_tokens"] = args.max_new_tokens
    translations = translate(
        model, tokenizer, lines, batch_size=args.batch_size, progress=sys.stderr.isatty(), **generate_kwargs
    )
    write_lines(args.output, translations)
    return 0


# ------------------------------------------------------------------------------------------------ ctranslate2


def cmd_translate_ctranslate2(args) -> int:
    """`translate --engine ctranslate2`: the same input and output handling, decoding by CTranslate2."""
    from .export_ctranslate2 import CTranslate2Model, import_ctranslate2, translate_ctranslate2

    for option, value in (("--dtype", args.dtype), ("--revision", args.revision)):
        if value is not None:
            raise ValueError(
                f"{option} is for --engine transformers; an exported CTranslate2 model has its weight "
                f"type fixed at export (--compute-type converts it when loading)."
            )
    if args.trust_remote_code:
        raise ValueError("--trust-remote-code is for --engine transformers: a CTranslate2 model runs no model code.")
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
        num_beams=args.beams,
        max_new_tokens=args.max_new_tokens,
        progress=sys.stderr.isatty(),
    )
    write_lines(args.output, translations)
    return 0


def cmd_export_ctranslate2(args) -> int:
    from .export_ctranslate2 import export_ctranslate2

    try:
        path = export_ctranslate2(
            args.model,
            args.output_dir,
            quantization=args.quantization,
            force=args.force,
            revision=args.revision,
            trust_remote_code=args.trust_remote_code,
        )
    except ImportError as error:
        raise ValueError(str(error)) from None
    print(path)
    return 0


def add_export_parser(commands) -> None:
    from .export_ctranslate2 import QUANTIZATIONS

    export = commands.add_parser(
        "export",
        help="write a trained model in another engine's format (ctranslate2)",
        description="Write a trained model in the format of another inference engine.",
    )
    formats = export.add_subparsers(dest="format", metavar="FORMAT", required=True)
    c = formats.add_parser(
        "ctranslate2",
        help="CTranslate2 (OpenNMT, Argos Translate / LibreTranslate): ~2x faster CPU decoding",
        description="Write the model as a CTranslate2 model directory, with its tokenizer and decoding settings "
        "(beam 4, length penalty 0.6, at most source length + 50 tokens), for `translate --engine ctranslate2` or "
        "any CTranslate2 runtime. Needs the ct2 extra: pip install 'vanilla-transformer[ct2]'.",
    )
    c.add_argument(
        "model",
        metavar="MODEL_DIR_OR_REPO",
        help="checkpoint directory (train.py's --output_dir, averaged/, a checkpoint-N) or Hub repo id, "
        "with its tokenizer",
    )
    c.add_argument("output_dir", metavar="OUTPUT_DIR", help="directory to write (must not exist, unless --force)")
    c.add_argument(
        "--quantization",
        default="float32",
        choices=QUANTIZATIONS,
        help="weight type stored (default float32; int8 is ~4x smaller and faster on CPUs)",
    )
    c.add_argument("--force", action="store_true", help="replace OUTPUT_DIR if it exists")
    add_checkpoint_options(c)
    c.set_defaults(func=cmd_export_ctranslate2)


# ------------------------------------------------------------------------------------------------ push, average


def cmd_push(args) -> int:
    from .hub import files_to_push, push_run

    if args.dry_run:
        for name in files_to_push(args.output_dir):
            print(name)
        print("README.md")
        return 0
    url = push_run(
        args.output_dir,
        args.repo_id,
        private=args.private,
        revision=args.revision,
        token=args.token,
        commit_message=args.commit_message,
        results=args.results,
        prune=not args.no_prune,
    )
    print(url)
    return 0


# ------------------------------------------------------------------------------------------------ attention


def cmd_attention(args) -> int:
    from .attention_figures import DPI, attention_weights, draw_attention, require_matplotlib

    try:
        require_matplotlib()  # before the model is loaded
    except ImportError as error:
        print(f"{PROG} attention: error: {error}", file=sys.stderr)
        return 1
    if args.beams is not None and args.beams < 1:
        raise ValueError(f"--beams must be at least 1, got {args.beams}.")
    output = Path(args.output)
    if not output.parent.is_dir():
        raise ValueError(
            f"--output {args.output!r}: the directory {str(output.parent)!r} does not exist; create it first."
        )
    model, tokenizer = load_model(
        args.model, revision=args.revision, device=args.device, trust_remote_code=args.trust_remote_code
    )
    weights = attention_weights(model, tokenizer, args.source, args.target, num_beams=args.beams)
    draw_attention(weights, args.kind, args.layer, args.heads).savefig(output, dpi=DPI)
    if weights.generated:
        print(f"translation: {weights.translation}")
    print(f"{args.kind} attention drawn in {output}")
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=__doc__.split("\n\n")[0],
        epilog=f"Run `{PROG} COMMAND --help` for the options of a command.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    t = commands.add_parser(
        "translate",
        help="translate text, one sentence per line",
        description="Translate one sentence per line with a trained model, in batches sorted by length, keeping the "
        "input order and empty lines; an over-long line is truncated to what the model takes, with a warning.",
    )
    t.add_argument(
        "--model",
        required=True,
        metavar="PATH_OR_REPO",
        help="checkpoint directory (train.py's --output_dir, averaged/, a checkpoint-N) or Hub repo id; "
        "the tokenizer is loaded from the same place",
    )
    t.add_argument(
        "--input", default="-", metavar="FILE", help="UTF-8 text, one sentence per line; '-' = stdin (default)"
    )
    t.add_argument(
        "--output", default="-", metavar="FILE", help="where to write one translation per line; '-' = stdout (default)"
    )
    t.add_argument(
        "--beams",
        type=int,
        default=None,
        metavar="N",
        help="beam size (default: the model's generation config, 4 as in the paper; 1 = greedy)",
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
    t.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        metavar="N",
        help="at most N tokens per translation (default: the model's rule, source length + 50)",
    )
    add_checkpoint_options(t)
    t.set_defaults(func=cmd_translate)

    add_export_parser(commands)

    p = commands.add_parser(
        "push",
        help="publish a trained model on the Hugging Face Hub",
        description="Upload a training run's output directory in one commit: weights (safetensors), config with "
        "auto_map, generation config, remote code with the translation pipeline, tokenizer, model card written from "
        "results.json, plots and results.json; never checkpoints, optimizer states, training_args.bin, TensorBoard "
        "runs or hypotheses. The token is checked before anything is uploaded.",
    )
    p.add_argument("output_dir", help="train.py's --output_dir, or a save_pretrained directory holding the tokenizer")
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
        "--commit-message", default=DEFAULT_COMMIT_MESSAGE, help=f"commit title (default: {DEFAULT_COMMIT_MESSAGE!r})"
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
    p.set_defaults(func=cmd_push)

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
        metavar="PATH_OR_REPO",
        help="checkpoint directory or Hub repo id (with its tokenizer)",
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
    a.add_argument(
        "--beams",
        type=int,
        default=None,
        metavar="N",
        help="beam size for the model's translation (default: its generation config's, as `translate`; 1 = greedy)",
    )
    a.add_argument("--device", default="auto", help="torch device: auto (default), cpu, cuda, mps")
    add_checkpoint_options(a)
    a.set_defaults(func=cmd_attention)

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
        # The training command owns its options (vanilla_transformer/train.py); this command only routes to it.
        from .train import main as train_main

        return train_main(argv[1:])
    if argv[:1] == ["average"]:
        # The averaging module owns its options; this command only routes to it.
        from .averaging import main as average_main

        return average_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format=f"{PROG}: %(levelname)s: %(message)s")
    from . import register

    register()  # deferred while the arguments were parsed (vanilla_transformer/__init__.py)
    try:
        return args.func(args)
    except ValueError as error:
        print(f"{PROG} {args.command}: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
