"""What every command of `vanilla-transformer` shares: the parser (one spelling of each option, one-line errors), the
argparse types that read a value, the line files of `translate` and `score`, and the decoding options.

One spelling: long options are written with underscores, as the Trainer's options and transformers' example scripts
spell them (`--batch_size`, `--num_beams`, `--output_dir`). The parser also takes the same name with hyphens
(`--batch-size`), rewritten before parsing: it parses, and `--help` lists the one spelling only; a name that is no
option of the command (a misspelling, another tool's name such as fairseq's `--beam`) is refused with the closest
option (`unrecognized`). This module imports only the standard library: the parsers are built without torch,
transformers or huggingface_hub, so that `--help` answers at once.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from .data.files import decode_utf8, not_utf8
from .generation_vanilla_transformer import LENGTH_PENALTY_FORMS, check_decoding


PROG = "vanilla-transformer"


def one_spelling(argv: list[str]) -> list[str]:
    """`argv` with every long option written the one way: hyphens inside the name become underscores (`--batch-size`
    -> `--batch_size`, also in `--batch-size=8`), as transformers' `HfArgumentParser` accepts both. Arguments after
    `--` are left as they are."""
    spelled = []
    for position, arg in enumerate(argv):
        if arg == "--":
            return spelled + list(argv[position:])
        if arg.startswith("--") and len(arg) > 2:
            name, equals, value = arg.partition("=")
            arg = "--" + name[2:].replace("-", "_") + equals + value
        spelled.append(arg)
    return spelled


class ArgumentParser(argparse.ArgumentParser):
    """argparse's parser with the one spelling of long options (`one_spelling`), and its errors on one line
    (`vanilla-transformer CMD: error: ...`, exit status 2) instead of the usage block: the message names the option,
    and `--help` lists them all. The subcommands' parsers are of this class too (argparse makes them so).

    No abbreviations (`allow_abbrev=False`, as `train`'s parser): argparse would take `--num_beam 4` for `--num_beams`
    silently but refuse `--length` as ambiguous, and an option added later would turn a working prefix into an
    error. A prefix is refused with the option it is closest to (`unrecognized`), in every command alike."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else args
        return super().parse_known_args(one_spelling(args), namespace)

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


def unrecognized(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """argparse's "unrecognized arguments" message, with the closest option of the command for each unknown flag."""
    options = [option for action in parser._actions for option in action.option_strings]
    hints = []
    for extra in extras:
        flag = extra.split("=", 1)[0]
        # A prefix of options (`--length`) means one of them: the closest of those, before any other close name.
        starting = [option for option in options if option.startswith(flag)] if flag.startswith("--") else []
        close = difflib.get_close_matches(flag, starting or options, n=1, cutoff=0 if starting else 0.6)
        close = close if flag.startswith("-") else []
        if close:
            hints.append((flag, close[0]))
    message = f"unrecognized arguments: {' '.join(extras)}"
    if len(hints) == 1:
        return f"{message} (did you mean {hints[0][1]}?)"
    if hints:
        return f"{message} (did you mean {', '.join(f'{close} for {flag}' for flag, close in hints)}?)"
    return message


# ------------------------------------------------------------------------------------------------ argparse types
# Each reads one option's value as argparse parses it: a value that is not one is argparse's one-line error naming the
# option ("argument --num_beams: must be an integer, got 'x'"), before anything is loaded. The decoding options'
# ranges are the library's rule (`check_decoding`, called by `decoding_options`).


def _number(kind, text: str):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be {'an integer' if kind is int else 'a number'}, got {text!r}"
        ) from None


def integer(text: str) -> int:
    """An integer (its range is checked with the options it goes with: the decoding options' by `check_decoding`)."""
    return _number(int, text)


def number(text: str) -> float:
    """A number (its range is checked with the options it goes with: the decoding options' by `check_decoding`)."""
    return _number(float, text)


def positive_int(text: str) -> int:
    """An integer of at least 1 (a count outside the decoding options: checkpoints to average)."""
    value = _number(int, text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# ------------------------------------------------------------------------------------------------ line files


def check_input(source: str, option: str = "--input") -> None:
    """ValueError naming `option` unless `source` is "-" (stdin) or a file to read (a regular file, or a pipe such as
    /dev/stdin or a shell's `<(...)`): checked before anything is loaded."""
    if source != "-" and (not Path(source).exists() or Path(source).is_dir()):
        raise ValueError(
            f"{option} {source!r} is not a file: pass a text file with one sentence per line, or '-' to read "
            f"standard input."
        )


def iter_lines(source: str, option: str = "--input") -> Iterator[str]:
    """The lines of `source` ("-" = stdin) one at a time, as they are read: decoded as UTF-8, split on "\\n" only
    (never on the other characters `str.splitlines` breaks at, which can occur inside a sentence), a trailing "\\r"
    and a byte-order mark removed. Memory holds one line, whatever the input's size. Errors name `option`, the flag
    that gave `source`: a missing file at once, a line that is not UTF-8 when it is reached."""
    check_input(source, option)
    return _decoded_lines(source, option)


def _decoded_lines(source: str, option: str) -> Iterator[str]:
    if source != "-":
        with open(source, "rb") as stream:
            yield from _byte_lines(stream, source, option)
    elif hasattr(sys.stdin, "buffer"):
        yield from _byte_lines(sys.stdin.buffer, "standard input", option)
    else:  # a text stream with no bytes beneath (a test's StringIO): the same lines from its text
        yield from _byte_lines((line.encode("utf-8") for line in _split_text(sys.stdin)), "standard input", option)


def _split_text(stream) -> Iterator[str]:
    """The lines of a text stream split on "\\n" only, each with its "\\n" (a text stream's iteration would also
    break at "\\r")."""
    pending = ""
    for chunk in iter(lambda: stream.read(1 << 16), ""):
        *lines, pending = (pending + chunk).split("\n")
        yield from (line + "\n" for line in lines)
    if pending:
        yield pending


def _byte_lines(stream, name: str, option: str) -> Iterator[str]:
    # Binary files iterate on b"\n" only, and no byte of a multi-byte UTF-8 character is b"\n": line by line
    # decoding is the whole file's.
    for number, data in enumerate(stream, start=1):
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as error:
            raise not_utf8(f"{option} {name}", number, data[error.start : error.start + 1]) from None
        if number == 1 and line.startswith("\ufeff"):  # a byte-order mark is not part of the first sentence
            line = line[1:]
        line = line[:-1] if line.endswith("\n") else line
        yield line[:-1] if line.endswith("\r") else line


def check_text(source: str, option: str = "--input") -> int | None:
    """The number of lines of the file `source`, once every one is checked to be UTF-8 (a ValueError naming `option`,
    the line and the conversion otherwise), read in blocks without keeping them: what `iter_lines` would find
    part-way, found before anything is loaded. None for stdin ("-") or a pipe, which can be read only once: their
    lines are checked as they are read."""
    if source == "-" or not Path(source).is_file():
        return None
    count, rest = 0, b""
    with open(source, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            data = rest + block
            end = data.rfind(b"\n") + 1  # decoded up to a line end: a block boundary can split a character
            decode_utf8(data[:end], f"{option} {source}", count)
            count, rest = count + data.count(b"\n", 0, end), data[end:]
    decode_utf8(rest, f"{option} {source}", count)
    return count + (rest != b"")


def read_lines(source: str, option: str = "--input") -> list[str]:
    """Every line of `source` ("-" = stdin), as `iter_lines` reads them."""
    return list(iter_lines(source, option))


def check_output(target: str, option: str = "--output", *, source: str | None = None) -> None:
    """ValueError naming `option` unless `target` is "-" (stdout) or a file that can be written: its directory exists
    and takes new files (tried with a file created and removed at once), it is not a directory, not a read-only file,
    and not the input file `source` (writing would empty it before it is read). Checked before anything is loaded,
    so that no work is lost to a wrong path at the end."""
    if target == "-":
        return
    path = Path(target)
    if path.is_dir():
        raise ValueError(
            f"{option} {target!r} is a directory: name the file to write, e.g. {str(path / 'out.txt')!r}."
        )
    if not path.parent.is_dir():
        raise ValueError(f"{option} {target!r}: the directory {str(path.parent)!r} does not exist; create it first.")
    if source not in (None, "-") and path.exists() and path.samefile(source):
        raise ValueError(f"{option} {target!r} is the input file: writing it would erase the sentences to translate.")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{option} {target!r} is read-only: choose another file, or make it writable first.")
    partial = partial_path(target)
    if partial is None:  # /dev/null, a FIFO: written directly
        return
    try:
        descriptor, probe = tempfile.mkstemp(dir=partial.parent, prefix=f".{partial.name}.")
    except OSError as error:
        raise ValueError(
            f"{option} {target!r}: no file can be written in {str(partial.parent)!r} ({error.strerror}); name a "
            f"file in a directory you can write to."
        ) from None
    os.close(descriptor)
    os.unlink(probe)


def partial_path(target: str) -> Path | None:
    """Where `line_writer` writes the file `target` until it is complete: NAME.partial beside it (beside the file a
    symbolic link names, so that the link stays); None for stdout ("-") and for what is not a regular file
    (/dev/null, a FIFO), written directly."""
    if target == "-":
        return None
    path = Path(os.path.realpath(target))
    if path.exists() and not path.is_file():
        return None
    return path.with_name(f"{path.name}.partial")


def _encode(lines: Iterable[str]) -> bytes:
    return "".join(line.replace("\r", " ").replace("\n", " ") + "\n" for line in lines).encode("utf-8")


def _write_stdout(data: bytes) -> None:
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is None:
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
    else:
        sys.stdout.flush()
        buffer.write(data)
        buffer.flush()


@contextlib.contextmanager
def line_writer(target: str, *, keep_partial: bool = True) -> Iterator[Callable[[Iterable[str]], None]]:
    """A function that appends lines to `target` ("-" = stdout), UTF-8, one per item, each ended by "\\n" (a line
    break inside an item: a space), each call's lines flushed at once. A file is written as NAME.partial beside it (`partial_path`) and renamed to NAME when the block
    ends without an error, with the mode of the file it replaces: NAME is only ever the complete output, or as it
    was. On an error or Ctrl-C, NAME.partial keeps the lines written (removed with `keep_partial=False`). Standard
    output, /dev/null or a FIFO are written directly."""
    check_output(target)
    if target == "-":
        yield lambda lines: _write_stdout(_encode(lines))
        return
    partial = partial_path(target)
    with open(partial or target, "wb") as stream:

        def write(lines: Iterable[str]) -> None:
            stream.write(_encode(lines))
            stream.flush()

        try:
            yield write
        except BaseException:
            if partial is not None and not keep_partial:
                stream.close()
                partial.unlink(missing_ok=True)
            raise
    if partial is not None:
        final = partial.with_name(partial.name.removesuffix(".partial"))
        if final.exists():
            shutil.copymode(final, partial)
        os.replace(partial, final)


# ------------------------------------------------------------------------------------------------ model options


def add_checkpoint_options(parser: argparse.ArgumentParser) -> None:
    """The options of every command that loads a checkpoint (`load_model`): which revision, and whether its own code
    may run."""
    parser.add_argument("--revision", default=None, help="branch, tag or commit of a Hub repo (default: main)")
    parser.add_argument(
        "--trust_remote_code",
        action="store_true",
        help="allow running the model code stored in the checkpoint instead of this package's (needed only "
        "for checkpoints whose code this package does not provide)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress bars (loading the weights, translating); without --quiet they are drawn only when stderr "
        "is a terminal, never into a log file",
    )


def quiet_progress_bars() -> None:
    """No progress bars from huggingface_hub and transformers ("Loading weights", downloads), once they are imported
    (the command line calls it after registering the model, which imports both)."""
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils.logging import disable_progress_bar

    disable_progress_bars()
    disable_progress_bar()


# ------------------------------------------------------------------------------------------------ decoding options

SAMPLING_OPTIONS = (("--temperature", "temperature"), ("--top_k", "top_k"), ("--top_p", "top_p"))
# The options `check_decoding` checks, as the commands name them (`--num_beams` for `num_beams`).
DECODING_OPTIONS = (
    "batch_size",
    "num_beams",
    "n_best",
    "max_new_tokens",
    "length_penalty",
    "length_penalty_form",
    "temperature",
    "top_k",
    "top_p",
)
FLAGS = {name: f"--{name}" for name in DECODING_OPTIONS}


def add_decoding_options(
    parser: argparse.ArgumentParser, *, n_best: bool = False, sampling: bool = True, max_new_tokens: bool = False
) -> None:
    """The decoding options, spelled alike in every command that decodes (`translate`, `attention`, `demo`,
    `export`) and as `generate` names them: each defaults to the model's generation config. argparse reads each
    value's type; `decoding_options` checks them (`check_decoding`, the library's check)."""
    group = parser.add_argument_group("decoding (default: the model's generation config)")
    group.add_argument("--num_beams", type=integer, default=None, metavar="N", help="beam size (1 = greedy)")
    group.add_argument(
        "--length_penalty",
        type=number,
        default=None,
        metavar="ALPHA",
        help="length penalty alpha of beam search (the paper's 0.6; 0 = none)",
    )
    group.add_argument(
        "--length_penalty_form",
        choices=tuple(LENGTH_PENALTY_FORMS),
        default=None,
        help="the penalty's form: length (log P / |Y| ** alpha) or gnmt (log P / ((5 + |Y|) / 6) ** alpha, the "
        "paper's); default: the generation config's",
    )
    if max_new_tokens:
        group.add_argument(
            "--max_new_tokens",
            type=integer,
            default=None,
            metavar="N",
            help="at most N tokens per translation (default: the model's rule, source length + 50)",
        )
    if n_best:
        group.add_argument(
            "--n_best",
            type=integer,
            default=None,
            metavar="N",
            help="write the N best distinct translations of each sentence (at most the beam size), one per line: the "
            "sentence's index from 0, the score, the text, tab-separated; fewer where the beam holds fewer",
        )
    if sampling:
        group.add_argument(
            "--sample",
            action="store_true",
            help="sample each token instead of searching (also implied by --temperature, --top_k, --top_p)",
        )
        group.add_argument("--temperature", type=number, default=None, metavar="T", help="sampling temperature (> 0)")
        group.add_argument(
            "--top_k",
            type=integer,
            default=None,
            metavar="K",
            help="sample from the K most likely tokens (0 = all)",
        )
        group.add_argument(
            "--top_p",
            type=number,
            default=None,
            metavar="P",
            help="sample from the smallest set of tokens of probability P (0 < P <= 1)",
        )
        group.add_argument("--seed", type=int, default=None, help="random seed of sampling (reproducible output)")


def decoding_options(args) -> dict:
    """The `generate` options that the decoding flags of `args` set ({} = the model's generation config), checked
    before anything is loaded: each value and the pairs that go together by `check_decoding` (the library's check,
    naming the flags), the flags that cannot go together here. A bad one is a ValueError naming the flags."""
    given = {name: getattr(args, name, None) for name in DECODING_OPTIONS}
    check_decoding(**given, names=FLAGS)
    beams, alpha, form = given["num_beams"], given["length_penalty"], given["length_penalty_form"]
    options = {}
    sampling_given = [flag for flag, name in SAMPLING_OPTIONS if getattr(args, name, None) is not None]
    if getattr(args, "sample", False) or sampling_given:
        flag = sampling_given[0] if sampling_given else "--sample"
        for other, value in (
            ("--num_beams", beams if beams != 1 else None),
            ("--length_penalty", alpha),
            ("--length_penalty_form", form),
        ):
            if value is not None:
                raise ValueError(
                    f"{flag} samples one hypothesis token by token; {other} is for beam search: give one or the other."
                )
        options.update(do_sample=True, num_beams=1)
        for _, name in SAMPLING_OPTIONS:
            if getattr(args, name) is not None:
                options[name] = getattr(args, name)
    elif getattr(args, "seed", None) is not None:
        raise ValueError(
            "--seed is for sampling (--sample, --temperature, --top_k, --top_p): search is deterministic."
        )
    for name, value in (("num_beams", beams), ("length_penalty", alpha), ("length_penalty_form", form)):
        if value is not None and name not in options:
            options[name] = value
    if given["max_new_tokens"] is not None:
        options["max_new_tokens"] = given["max_new_tokens"]
    return options


def apply_decoding(generation_config, options: dict) -> None:
    """Decoding flags into a model's generation config (for the commands that read it: `demo`, `export`)."""
    for name, value in options.items():
        setattr(generation_config, name, value)
