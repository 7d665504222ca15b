"""The evaluation commands of `vanilla-transformer`: `attention` (a figure of what the model attends to, the paper's
Figures 3-5) and `score` (BLEU of a translation file), each as its parser beside the function that runs it.

    vanilla-transformer attention --model runs/en-de "A man is riding a bicycle." --layer 4 --output cross.png
    vanilla-transformer score --hypotheses newstest2014.hyp.de --references newstest2014.de --lang de

The parsers are built without torch or matplotlib: the functions import what they run.
"""

from __future__ import annotations

from pathlib import Path

from ..arguments import (
    add_checkpoint_options,
    add_decoding_options,
    check_output,
    decoding_options,
    read_lines,
)
from ..translation.loading import check_model_location
from ..translation.shipped import resolve_model


# ------------------------------------------------------------------------------------------------ attention


def add_attention_parser(commands) -> None:
    """`attention`: a figure of the model's attention weights for one sentence."""
    a = commands.add_parser(
        "attention",
        help="draw what the model attends to (the paper's Figures 3-5) for one sentence",
        description="Translate SOURCE (or take --target) and draw the model's attention weights as the paper's "
        "Figures 3-5 do: cross-attention heatmaps, or self-attention lines (docs/attention.md).",
    )
    a.add_argument("source", metavar="SOURCE", help="the source sentence")
    a.add_argument(
        "--model",
        required=True,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a shipped model's name, a checkpoint directory or a Hub repo id (with its tokenizer)",
    )
    a.add_argument(
        "--output",
        required=True,
        metavar="FILE.png",
        help="where to write the figure; its extension picks the format: .png, .svg, .pdf or another that matplotlib "
        "writes (.jpg, .eps, ...)",
    )
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
    a.set_defaults(func=cmd_attention, check=check_attention, command_parser=a)


def check_attention(args) -> dict:
    """The checks of `attention` that need only its options and the file system, run before torch is imported: the
    sentence (and --target) not blank, the figure's directory, the model's location. Returns the decoding options."""
    options = decoding_options(args)  # the options alone first, then the files
    if options and args.target is not None:
        raise ValueError("the decoding options are for the model's own translation: --target gives the translation.")
    if not args.source.strip():
        raise ValueError(
            f'SOURCE {args.source!r} is empty: give the sentence to draw, e.g. "A man is riding a bicycle."'
        )
    if args.target is not None and not args.target.strip():
        raise ValueError(f"--target {args.target!r} is empty: give the translation of SOURCE, or leave --target out.")
    check_output(args.output)
    if not Path(args.output).suffix:
        raise ValueError(
            f"--output {args.output!r}: the file name must end in a format matplotlib writes: .png, .svg, .pdf."
        )
    check_model_location(args.model)
    return options


def cmd_attention(args, options: dict) -> int:
    """`options`: the decoding options `check_attention` returned."""
    from ..translation.loading import load_config, load_model
    from .attention import (
        DPI,
        attention_weights,
        draw_attention,
        head_indices,
        layer_indices,
        require_matplotlib,
        save_formats,
    )

    # Everything that can be checked without the weights is checked first: loading and translating take seconds.
    try:
        require_matplotlib()
    except ImportError as error:
        raise ValueError(str(error)) from None
    output = Path(args.output)
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


def add_score_parser(commands) -> None:
    """`score`: BLEU of a translation file, sacreBLEU and the paper's tokenized BLEU."""
    s = commands.add_parser(
        "score",
        help="BLEU of a translation file: sacreBLEU, and the paper's tokenized BLEU (--lang)",
        description="Score one translation per line against one reference per line with sacreBLEU (cased, "
        "detokenized, 13a), the figure this package reports; --lang adds the paper's tokenized BLEU (README.md).",
    )
    s.add_argument("--hypotheses", required=True, metavar="FILE", help="translations, one per line ('-' = stdin)")
    s.add_argument("--references", required=True, metavar="FILE", help="references, one per line, in the same order")
    s.add_argument(
        "--lang", default=None, metavar="CODE", help="target language (e.g. de): also print the paper-style BLEU"
    )
    s.set_defaults(func=cmd_score, check=check_score, command_parser=s)


def check_score(args) -> tuple[list[str], list[str]]:
    """The checks of `score` before sacreBLEU is imported: both files read (returned for `cmd_score`: a '-' can be
    read once), as many lines in each, at least one, and a --lang that Moses' tokenizer knows."""
    if args.hypotheses == "-" and args.references == "-":
        raise ValueError("--hypotheses and --references are both '-': standard input can give only one of them.")
    hypotheses, references = read_lines(args.hypotheses, "--hypotheses"), read_lines(args.references, "--references")
    if len(hypotheses) != len(references):
        raise ValueError(
            f"--hypotheses has {len(hypotheses)} lines and --references {len(references)}: line i of one must be "
            f"the translation of line i of the other."
        )
    if not hypotheses:
        raise ValueError("--hypotheses is empty: BLEU needs at least one sentence.")
    if args.lang is not None:
        from .bleu import MOSES_LANGUAGES

        if args.lang not in MOSES_LANGUAGES:
            raise ValueError(
                f"--lang {args.lang!r} is not a language code that Moses' tokenizer knows "
                f"({', '.join(MOSES_LANGUAGES)})."
            )
    return hypotheses, references


def cmd_score(args, lines: tuple[list[str], list[str]]) -> int:
    """BLEU of a translation file against its references: sacreBLEU (the figure this package reports), and with
    `--lang` the paper's tokenized, compound-split BLEU (Table 2's method) beside it. `lines`: the hypotheses and
    references `check_score` read."""
    hypotheses, references = lines
    from .bleu import compute_bleu, paper_style_bleu

    sacre = compute_bleu(hypotheses, references)
    print(f"sacreBLEU        {sacre['score']:.2f}  {sacre['signature']}")
    if args.lang:
        paper = paper_style_bleu(hypotheses, references, args.lang)
        print(f"tokenized BLEU   {paper['score']:.2f}  {paper['method']} (the paper's Table 2)")
    return 0
