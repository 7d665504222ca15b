"""`vanilla-transformer demo`: the web page of a model (page.py), or with --write_space a Hugging Face Space that runs
it (space.py). docs/demo.md shows the page.

    vanilla-transformer demo --model runs/en-de [--host 127.0.0.1] [--port 7860] [--share]
    vanilla-transformer demo --model runs/en-de --compare runs/en-de/averaged
    vanilla-transformer demo --model your-name/transformer-en-de --write_space space/ --requirement SPEC

The parser is built without gradio, torch or transformers: `cmd_demo` imports them once the options are checked.
"""

from __future__ import annotations

import errno
import json
import os
import socket
from pathlib import Path

from ..arguments import add_checkpoint_options, add_decoding_options, apply_decoding, decoding_options
from ..translation.loading import check_model_location
from ..translation.shipped import DEFAULT_MODEL, PRETRAINED_DIR, resolve_model


# ------------------------------------------------------------------------------------------------ demo


def add_demo_parser(commands) -> None:
    """`demo`: the web page of a model (docs/demo.md)."""
    d = commands.add_parser(
        "demo",
        help="a web page that translates and shows attention, beam search steps and word alignment",
        description="Serve a Gradio page that translates what a visitor types and shows the model's attention, its "
        "beam search step by step and a word alignment (the demo extra; docs/demo.md).",
    )
    d.add_argument(
        "--model",
        default=DEFAULT_MODEL,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help=f"a shipped model's name (default {DEFAULT_MODEL}), a checkpoint directory or a Hub repo id (with its "
        "tokenizer); with --write_space a Hub repo id",
    )
    d.add_argument(
        "--compare",
        default=None,
        type=resolve_model,
        metavar="NAME_PATH_OR_REPO",
        help="a second model shown beside --model, from the same source language: e.g. the averaged model of the "
        "same run, or multi30k-en-fr beside multi30k-en-de",
    )
    d.add_argument("--host", default="127.0.0.1", help="interface to serve on (default 127.0.0.1: this machine only)")
    d.add_argument("--port", type=int, default=7860, help="port (default 7860; 0 = the first free one from 7860 up)")
    d.add_argument("--share", action="store_true", help="also open a public gradio.live link (Gradio's tunnel)")
    d.add_argument("--device", default="auto", help="torch device: auto (default), cpu, cuda, mps")
    d.add_argument(
        "--write_space",
        default=None,
        metavar="DIR",
        help="write a Hugging Face Space (app.py, requirements.txt, README.md) running this page for the Hub model "
        "--model into DIR, instead of serving",
    )
    d.add_argument(
        "--requirement",
        default=None,
        metavar="SPEC",
        help="with --write_space: the Space's requirements.txt line that installs this package (default: from the "
        "package's Repository URL; docs/demo.md)",
    )
    add_decoding_options(d, sampling=False)  # the page's "model default" decoding
    add_checkpoint_options(d)
    d.set_defaults(func=cmd_demo, check=check_demo, command_parser=d)


def check_demo(args) -> dict:
    """The checks of `demo` that need only its options and the file system, run before torch and gradio load.
    Returns the decoding options: the page's "model default" decoding, and its controls' first values."""
    decoding = decoding_options(args)  # the options alone first, then the files
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port must be between 0 and 65535 (0: the first free one from 7860 up), got {args.port}.")
    if not args.host.strip():
        raise ValueError("--host must name an interface, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every one).")
    if args.write_space is not None:
        if args.compare is not None:
            raise ValueError("--compare is for the page served here: --write_space writes a Space for one model.")
        return decoding
    if args.requirement is not None:
        raise ValueError("--requirement is for --write_space (the Space's requirements.txt).")
    check_model_location(args.model)
    if args.compare is not None:
        check_model_location(args.compare, option="--compare")
        first, second = source_language(args.model), source_language(args.compare)
        if first and second and first != second:
            raise ValueError(
                f"--compare {_display_name(args.compare)!r} translates from {second!r} and --model "
                f"{_display_name(args.model)!r} from {first!r}: the page gives both the visitor's sentence, so they "
                "must read one language (e.g. --model multi30k-en-de --compare multi30k-en-fr)."
            )
    check_port(args.host, args.port)  # last: the port is the machine's state, the options above are the user's
    return decoding


def check_port(host: str, port: int) -> None:
    """ValueError naming --port (or --host) unless the page can listen on `host`:`port`, tried by listening there
    for an instant, as the server will (port 0: Gradio takes the first free one from 7860 up)."""
    if port == 0:
        return
    not_here = f"--host {host!r} is no address of this machine: e.g. 127.0.0.1, or 0.0.0.0 (every one)."
    try:
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    except OSError:
        raise ValueError(not_here) from None
    try:
        with socket.create_server((host, port), family=family):
            pass
    except OSError as error:
        if error.errno == errno.EADDRNOTAVAIL:
            raise ValueError(not_here) from None
        reason = os.strerror(error.errno) if error.errno else str(error)
        raise ValueError(
            f"--port {port} on {host} cannot be listened on ({reason}): another program has it, or the port is not "
            f"yours to open; choose another, e.g. --port {port + 1 if port < 65535 else 8080}, or --port 0 for the "
            "first free one from 7860 up."
        ) from None


def source_language(model: str) -> str | None:
    """The language a local model translates from, as the results.json that `train` and `scripts/ship_model.py` write
    beside it says; None for a Hub repo id or a folder without one (the page then takes the two models as given)."""
    try:
        return json.loads((Path(model).expanduser() / "results.json").read_text(encoding="utf-8")).get("src_lang")
    except (OSError, ValueError, AttributeError):
        return None


def _display_name(model: str) -> str:
    """A shipped model by its short name (its directory is deep in site-packages), any other model as given."""
    return Path(model).name if Path(model).parent == PRETRAINED_DIR else model


def cmd_demo(args, decoding: dict) -> int:
    """The web page (vanilla_transformer/demo/, docs/demo.md), or with --write_space a Space that runs it.
    `decoding`: the decoding options `check_demo` returned."""
    if args.write_space is not None:
        if decoding:
            raise ValueError(
                "the decoding options are for the page served here: a Space decodes as its model's config."
            )
        from .space import write_space

        path = write_space(args.write_space, args.model, revision=args.revision, requirement=args.requirement)
        print(f"Space written in {path}: upload it with `hf upload --repo-type space NAME {path}`")
        return 0
    from .page import DEMO_HINT, build_demo, launch_demo

    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio  # noqa: F401
    except ImportError:
        raise ValueError(f"the demo needs gradio: {DEMO_HINT}") from None
    from ..translation.loading import load_model

    options = dict(revision=args.revision, device=args.device, trust_remote_code=args.trust_remote_code)
    model, tokenizer = load_model(args.model, **options)
    apply_decoding(model.generation_config, decoding)
    compare = None
    if args.compare is not None:
        model_b, tokenizer_b = load_model(args.compare, **options)
        apply_decoding(model_b.generation_config, decoding)
        compare = (model_b, tokenizer_b, _display_name(args.compare))
    blocks = build_demo(model, tokenizer, model_name=_display_name(args.model), compare=compare)
    check_port(args.host, args.port)  # again: the model took seconds to load, and the port may have been taken since
    launch_demo(blocks, host=args.host, port=args.port or None, share=args.share)
    return 0
