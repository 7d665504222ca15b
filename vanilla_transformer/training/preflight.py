"""What `vanilla-transformer train` does before torch and transformers load: `--help`, and every check that needs
only the options and the file system. Standard library only.

The options of `train` are the fields of five dataclasses (`options.py`), one of them the Trainer's
`Seq2SeqTrainingArguments`, whose import loads torch and transformers (seconds). `options.json`, beside this module,
describes the parser those dataclasses make (each option's flags, type, default, help and `--help` group); it is
written by `options.write_option_table()`, and a test keeps it equal to the live parser. From it `option_parser`
builds an argparse parser that prints the same `--help` and reads the same command line without those imports, and
`preflight` runs the checks: the options' syntax, the recipe, the dataset's files and splits, the languages of a
table, and the state of `--output_dir`. Each failure is a ValueError naming the flag, raised before anything is
written; the full checks run again once the data and the arguments are loaded.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import os
import re
import tempfile
from pathlib import Path

from ..checkpoints import CHECKPOINT_RE, last_checkpoint
from ..data.files import (
    TABLE_SUFFIXES,
    check_line_files,
    check_pair_args,
    check_rows,
    check_table,
    find_line_file,
    find_table,
    line_file_languages,
    split_stems,
)
from ..hub_lookup import check_hub_name


PROG = "vanilla-transformer train"
OPTIONS_FILE = Path(__file__).resolve().parent / "options.json"  # written by options.write_option_table()
RECIPES_DIR = Path(__file__).resolve().parent / "recipes"  # shipped in the wheel
# A recipe's key for options that replace its own when the run trains in float32 on a CPU (`bf16: "auto"` on a CPU
# without native bfloat16, or bf16 off): the hour then trains on fewer tokens, and a short run wants other settings
# (docs/model.md, "The cpu_float32 options").
CPU_FLOAT32 = "cpu_float32"
# The recipe of a run without --recipe, by the size of its training split (docs/training.md, "Without --recipe"):
# the Multi30k recipes less their data keys for a corpus of that kind of size, the same with the paper's
# regularisation (label smoothing and dropout 0.1, no subword splitting) from LARGE_CORPUS pairs on.
SMALL_CORPUS_RECIPE, LARGE_CORPUS_RECIPE = "own_data_small", "own_data_large"
LARGE_CORPUS = 1_000_000
TRAINER_GROUP = "the Trainer's other options (Seq2SeqTrainingArguments)"
RUNS_DIR = "runs"  # where a run without --output_dir writes, as the recipes do: runs/DATASET_SRC_TGT_PRESET
# What a run writes in its output directory before its first checkpoint: the tokenizer it trains, and TensorBoard's
# logs. A directory holding only these is a run stopped before it saved anything: a new run starts there.
BEFORE_FIRST_CHECKPOINT = ("tokenizer", "runs")
# A column name taken for a language code: two lowercase letters (ISO 639-1), optionally a script or region
# (`pt_BR`, `zh-Hans`).
LANGUAGE_CODE = re.compile(r"^[a-z]{2}([-_][A-Za-z0-9]{2,8})?$")


def default_recipe(train_pairs: int | None = None) -> str:
    """The shipped recipe a run without --recipe trains with: `own_data_large` for a training split of LARGE_CORPUS
    pairs or more, else `own_data_small` (also before the data is read, `train_pairs` None).

    Why the line is there: the Multi30k recipe regularises hard (label smoothing 0.2, dropout 0.15, subword
    splitting), which the search chose for an hour that passes over its 29,000 pairs ~20-40 times. A run passes over
    a million pairs a few times at most (the float32 CPU hour holds ~9 million tokens per side, a million pairs ~20-25
    million), where the paper's values for WMT14's 4.5 million pairs (section 5.4) are the evidence."""
    return LARGE_CORPUS_RECIPE if train_pairs is not None and train_pairs >= LARGE_CORPUS else SMALL_CORPUS_RECIPE


def did_you_mean(name: str, candidates) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def shipped_recipes() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.json"))


def recipe_path(name: str) -> Path:
    """The JSON file of `--recipe`: a shipped recipe by name (`multi30k_en_de_cpu`), or a file."""
    path = Path(name)
    if path.is_file():
        return path
    if (RECIPES_DIR / f"{name}.json").is_file() and path.name == name:
        return RECIPES_DIR / f"{name}.json"
    names = ", ".join(shipped_recipes())
    raise ValueError(f"--recipe {name!r} does not exist: it is neither a shipped recipe ({names}) nor a JSON file.")


def read_recipe(name: str, known: set[str]) -> tuple[dict, dict]:
    """(options, cpu_float32 options) of a recipe file; an unknown key is an error with a did-you-mean."""
    path = recipe_path(name)
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as error:
        raise ValueError(f"--recipe {str(path)!r} is not valid JSON ({error}).") from None
    if not isinstance(options, dict):
        raise ValueError(f"--recipe {str(path)!r} must hold a JSON object of options.")
    cpu_float32 = options.pop(CPU_FLOAT32, {})
    if not isinstance(cpu_float32, dict):
        raise ValueError(f"--recipe {str(path)!r}: {CPU_FLOAT32!r} must be an object of options, got {cpu_float32!r}.")
    precision = {"bf16", "fp16", "use_cpu"}  # they decide whether the cpu_float32 options apply
    for key in sorted(set(cpu_float32) & precision):
        raise ValueError(
            f"--recipe {str(path)!r}: {key!r} in {CPU_FLOAT32!r}: the precision options cannot be set there (they "
            f"decide whether those options apply)."
        )
    for where, keys, allowed in (("", options, known), (f" in {CPU_FLOAT32!r}", cpu_float32, known)):
        for key in sorted(set(keys) - allowed):
            raise ValueError(
                f"--recipe {str(path)!r}: unknown option {key!r}{where}{did_you_mean(key, allowed) or '.'}"
            )
    return options, cpu_float32


# ------------------------------------------------------------------------------------------------ the parser


class HelpFormatter(argparse.HelpFormatter):
    """One spelling per option (`--max_tokens N`; `--max-tokens`, HfArgumentParser's hyphen form, still parses), no
    `--no_plots` (`--plots false` says the same), a short placeholder for a number or a boolean, the default only
    where there is one, and the value a recipe's `cpu_float32` options give (`help_defaults`). (argparse's formatter
    has no public hooks: its own subclasses, e.g. `ArgumentDefaultsHelpFormatter`, override its private methods too.)"""

    def add_argument(self, action):
        if not any(flag.startswith("--no_") for flag in action.option_strings):
            super().add_argument(action)

    def _format_action_invocation(self, action):
        if not action.option_strings:
            return super()._format_action_invocation(action)
        if action.nargs == 0:  # `-h, --help`; `--help_all` without its hyphen form
            return ", ".join(dict.fromkeys(_shown_name(option) for option in action.option_strings))
        return f"{action.option_strings[0]} {self._format_args(action, _placeholder(action))}"

    def _get_help_string(self, action):
        help_text = action.help or ""
        shown = action.default not in (None, False, "", argparse.SUPPRESS) and action.option_strings
        notes = []
        if shown:
            notes.append(f"default: {action.default.value if hasattr(action.default, 'value') else action.default}")
        if hasattr(action, CPU_FLOAT32):
            notes.append(f"{getattr(action, CPU_FLOAT32)} when training in float32 on a CPU")
        return help_text + (f" ({'; '.join(notes)})" if notes else "")


def _shown_name(option: str) -> str:
    """`--max-tokens` as `--max_tokens`: the name `--help` shows."""
    return "--" + option[2:].replace("-", "_") if option.startswith("--") else option


def _placeholder(action) -> str:
    """The value's placeholder in `--help`: N for an integer, X for a real number, BOOL, else the option's name."""
    kind = getattr(action.type, "__name__", "")
    return {"int": "N", "float": "X", "string_to_bool": "BOOL"}.get(kind, action.dest.upper())


class ErrorsAsValues:
    """A parser whose errors are ValueErrors: `train` prints them as every command prints its errors, one line
    `vanilla-transformer train: error: ...` naming the flag, exit status 2."""

    def error(self, message: str):
        raise ValueError(message)


class OptionParser(ErrorsAsValues, argparse.ArgumentParser):
    pass


def parser_settings() -> dict:
    """The keyword arguments of the parser of `train` (the live one, `options.build_parser`, and `option_parser`)."""
    return dict(
        prog=PROG,
        usage=f"{PROG} [--recipe RECIPE] [--dataset DATA] [--output_dir DIR] [OPTIONS]",
        description="Train the Transformer of 'Attention Is All You Need' with the paper's recipe (section 5) on the "
        "Hugging Face Trainer. Options given on the command line win over the recipe's; without --recipe the recipe "
        f"is {SMALL_CORPUS_RECIPE} ({LARGE_CORPUS_RECIPE} for a training split of {LARGE_CORPUS:,} pairs or more).",
        epilog="Recipes shipped: " + ", ".join(shipped_recipes()) + ". `--recipe RECIPE --help` shows the recipe's "
        "values as the defaults (without --recipe, those of the small-corpus recipe). docs/training.md explains every option group.",
        allow_abbrev=False,
        formatter_class=HelpFormatter,
        add_help=False,  # the help is printed once the recipe has set the defaults it shows
    )


def add_parser_options(parser) -> None:
    """The options of `train` that are no dataclass field: `--help`, `--recipe`, `--help_all`."""
    parser.add_argument("-h", "--help", action="store_true", help="Show this help message and exit.")
    parser.add_argument(
        "--recipe",
        default=None,
        metavar="RECIPE",
        help="A shipped recipe by name (training/recipes/), or a JSON file of options. Not --preset: the model size.",
    )
    parser.add_argument(
        "--help_all", "--help-all", action="store_true", help="Show the Trainer's other options too, and exit."
    )


def describe_parser(parser) -> list[dict]:
    """The option groups of the live parser (`options.build_parser(show_all=True)`) as `options.json` holds them:
    each group's title and options, each option's flags, destination, type, how many values, default, choices and
    help. A type that is not a number nor a boolean is read as text here (the live parser converts it)."""
    groups = []
    for group in parser._action_groups:
        options = []
        for action in group._group_actions:
            if action.dest in ("help", "help_all", "recipe"):
                continue  # add_parser_options
            kind = getattr(action.type, "__name__", "")
            option = {
                "flags": list(action.option_strings),
                "dest": action.dest,
                "action": "store" if action.nargs != 0 else _constant_action(action),
            }
            if option["action"] == "store":
                option["type"] = kind if kind in ("int", "float", "string_to_bool") else "str"
                if getattr(action.type, "none", False):
                    option["none"] = True  # `--max_tokens none`
                choices = None if action.choices is None else [str(choice) for choice in action.choices]
                option.update(nargs=action.nargs, const=action.const, choices=choices, metavar=action.metavar)
            option.update(default=action.default, help=action.help)
            options.append(option)
        if options:
            groups.append({"title": group.title, "description": group.description, "options": options})
    return groups


def _constant_action(action) -> str:
    return "store_false" if isinstance(action, argparse._StoreFalseAction) else "store_true"


def string_to_bool(value):
    """transformers' `hf_argparser.string_to_bool`: the booleans of the command line."""
    if isinstance(value, bool):
        return value
    if value.lower() in ("yes", "true", "t", "y", "1"):
        return True
    if value.lower() in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(
        f"Truthy value expected: got {value} but expected one of yes/no, true/false, t/f, y/n, 1/0 (case insensitive)."
    )


def number_or_none(kind):
    """`kind` (int or float) of a command-line word, or None for `none`: an optional number (`--max_tokens none`)."""

    def parse(text: str):
        return None if text.strip().lower() == "none" else kind(text)

    parse.__name__ = kind.__name__  # argparse's message: "invalid int value"
    parse.none = True
    return parse


TYPES = {"int": int, "float": float, "string_to_bool": string_to_bool, "str": str}


def option_table() -> list[dict]:
    return json.loads(OPTIONS_FILE.read_text(encoding="utf-8"))


def option_parser(show_all: bool = False, table: list[dict] | None = None) -> OptionParser:
    """The parser of `train` from `options.json`: the live parser's options, groups, defaults and help, without
    torch or transformers. The Trainer's other options are listed with `show_all` (accepted either way)."""
    parser = OptionParser(**parser_settings())
    add_parser_options(parser)
    for group in option_table() if table is None else table:
        target = parser.add_argument_group(group["title"], group["description"])
        for option in group["options"]:
            kwargs = dict(dest=option["dest"], default=option["default"], help=option["help"])
            if group["title"] == TRAINER_GROUP and not show_all:
                kwargs["help"] = argparse.SUPPRESS
            if option["action"] == "store":
                kind = TYPES[option["type"]]
                kwargs.update(type=number_or_none(kind) if option.get("none") else kind, nargs=option["nargs"])
                kwargs.update(choices=option["choices"], metavar=option["metavar"])
                if option["nargs"] == "?":
                    kwargs["const"] = option["const"]
            else:
                kwargs["action"] = option["action"]
            target.add_argument(*option["flags"], **kwargs)
    return parser


_NOT_GIVEN = object()  # the value of an option the command line does not give (`given_options`)


def given_options(parser, argv: list[str], names) -> dict:
    """The options of `names` (and `--help`, `--help_all`, `--recipe`) that `argv` gives, with their values as the
    parser reads them; an unknown option is an error naming the closest one. The parser starts from a namespace in
    which every option is `_NOT_GIVEN` (argparse fills in a default only where the namespace has no value)."""
    names = set(names) | {"help", "help_all", "recipe"}
    namespace, extra = parser.parse_known_args(argv, argparse.Namespace(**dict.fromkeys(names, _NOT_GIVEN)))
    if extra:
        unknown = next((a for a in extra if a.startswith("-")), extra[0])
        flags = [f"--{name}" for name in names]
        raise ValueError(f"unrecognized argument {unknown!r}{did_you_mean(unknown.split('=', 1)[0], flags) or '.'}")
    return {name: value for name, value in vars(namespace).items() if value is not _NOT_GIVEN}


def with_defaults(parser, given: dict, defaults: dict) -> dict:
    """Every option's value: the one `given` (`given_options`), else its default in `defaults` (a recipe's), else the
    parser's. What `parse_args` returns with `defaults` set, without a second pass over the command line: a default
    given as text is converted by the option's type, and an option named by two flags (`--plots`, `--no_plots`) takes
    the first one's default, as argparse does."""
    values = dict(given)
    for action in parser._actions:  # argparse's own order (its `parse_known_args`)
        if action.dest == argparse.SUPPRESS or action.dest in values:
            continue
        values[action.dest] = defaults.get(action.dest, action.default)
        if isinstance(values[action.dest], str):
            try:
                values[action.dest] = parser._get_value(action, values[action.dest])
            except argparse.ArgumentError as error:  # a recipe's word the option's type refuses
                parser.error(str(error))
    return values


def help_defaults(given: dict, recipe: dict) -> dict:
    """The defaults `--help` shows: the recipe's, and `max_steps` -1 where `--num_train_epochs` is given without it
    (`options.build_arguments` does the same for a run)."""
    defaults = dict(recipe)
    if "num_train_epochs" in given and "max_steps" not in given:
        defaults["max_steps"] = -1
    return defaults


def set_help_defaults(parser, defaults: dict, cpu_float32: dict) -> None:
    """`defaults` as the parser's, and each `cpu_float32` option's value on its action, for `HelpFormatter`: the help
    is the same on every machine (whether the run trains in float32 on a CPU is known once torch is loaded)."""
    parser.set_defaults(**defaults)
    for action in parser._actions:
        if action.dest in cpu_float32 and action.nargs != 0:
            setattr(action, CPU_FLOAT32, cpu_float32[action.dest])


def format_help(parser, given: dict, recipe: dict, cpu_float32: dict) -> str:
    """`--help` of `parser` (the live one or `option_parser`'s) for a command line that gives `given`, with the
    recipe's options `recipe` and `cpu_float32`."""
    set_help_defaults(parser, help_defaults(given, recipe), cpu_float32)
    return parser.format_help()


# ------------------------------------------------------------------------------------------------ the checks


def preflight(argv: list[str]) -> tuple[list[str], tuple[str, dict, dict]]:
    """Print `--help` / `--help_all` and exit, or check what needs only the options and the file system. Returns
    `argv`, with `--src_lang` / `--tgt_lang` added where a table's two columns are language codes and the command line
    and the recipe name none (`table_languages`), and the recipe read (name, options, cpu_float32 options), which the
    command hands to `options.read_command_line`: one pass of this parser over `argv`, one read of the recipe."""
    table = option_table()
    known = {option["dest"] for group in table for option in group["options"]}
    parser = option_parser(table=table)
    given = given_options(parser, argv, known)
    name = given.get("recipe") or default_recipe()
    recipe, cpu_float32 = read_recipe(name, known)
    if given.get("help") or given.get("help_all"):
        if given.get("help_all"):
            parser = option_parser(show_all=True, table=table)
        print(format_help(parser, given, recipe, cpu_float32), end="")
        raise SystemExit(0)
    values = with_defaults(parser, given, recipe)
    check_values(values)
    named = set(given) | set(recipe)
    languages = check_data(values, named)
    values.update(languages)
    check_pair_args(values["src_lang"], values["tgt_lang"], values.get("src_column"), values.get("tgt_column"))
    check_columns(values)
    added = [item for name, code in languages.items() for item in (f"--{name}", code)]
    if not values["validation_split"]:  # no validation split: nothing to evaluate on
        if given.get("eval_strategy", "no") != "no":
            raise ValueError(
                f"--eval_strategy {given['eval_strategy']} evaluates on the validation split, but --validation_split "
                f"'' names none: give a validation split, or leave --eval_strategy out."
            )
        added += ["--eval_strategy", "no"]
    if not values.get("output_dir"):
        values["output_dir"] = default_output_dir(values)
        added += ["--output_dir", values["output_dir"]]
    if int(os.environ.get("RANK", "0")) == 0:  # the other processes of a distributed run find the main one's files
        check_output_dir(values)
    return argv + added, (name, recipe, cpu_float32)


def check_values(values: dict) -> None:
    """The checks of single options' values that the parser's types do not make: run here, before torch, and again
    by the options' dataclasses (`options.py`), which import these rules."""
    bf16_word(values.get("bf16"))
    check_minutes(values.get("max_train_minutes"))


TRUE_WORDS, FALSE_WORDS = ("true", "yes", "1"), ("false", "no", "0")


def bf16_word(value) -> bool | str:
    """`--bf16` as a bool, or "auto"; ValueError for another word (the one rule of its values)."""
    if not isinstance(value, str):
        return bool(value)
    word = value.strip().lower()
    if word == "auto":
        return word
    if word not in TRUE_WORDS + FALSE_WORDS:
        raise ValueError(f"`bf16` must be true, false or auto, got {value!r}.")
    return word in TRUE_WORDS


def check_minutes(minutes) -> None:
    if minutes is not None and not minutes > 0:
        raise ValueError(f"`max_train_minutes` must be positive, got {minutes!r}.")


def default_output_dir(values: dict) -> str:
    """The output directory of a run without --output_dir, named as the recipes name theirs
    (runs/multi30k_en_de_small): runs/ + the dataset's name, the two languages and the model size."""
    dataset = Path(str(values["dataset"]).rstrip("/")).name or "data"
    if dataset == "raw" and Path(values["dataset"]).parent.name == "task1":  # Multi30k's data/task1/raw
        dataset = "multi30k"
    name = "_".join(str(part) for part in (dataset, values["src_lang"], values["tgt_lang"], values["preset"]))
    return str(Path(RUNS_DIR) / re.sub(r"[^\w.-]+", "_", name))


def check_data(values: dict, named: set[str]) -> dict:
    """The checks of --dataset on the file system, as `data.load_parallel_corpus` reads it; returns the languages a
    table gives (`table_languages`). Of a Hub dataset id, only that the Hub (or, offline, its cache) holds it: its
    splits and columns are checked when it is loaded."""
    dataset = values["dataset"]
    path = Path(dataset).expanduser()
    splits = {"train": values["train_split"]}
    for split in ("validation", "test"):  # '' = none
        if values.get(f"{split}_split"):
            splits[split] = values[f"{split}_split"]
    if path.is_file():
        raise ValueError(
            f"--dataset {dataset!r} is a single file, which holds one split, but training needs {len(splits)} "
            f"({', '.join(splits.values())}): pass a directory with one file per split (e.g. train.tsv, val.tsv)."
        )
    if not path.is_dir():
        hub_id = not (
            dataset.startswith(("/", ".", "~")) or dataset.count("/") > 1 or dataset.endswith(TABLE_SUFFIXES)
        )
        if hub_id:  # asked of the Hub once here (or of its cache, offline): `datasets` retries each request
            check_hub_name(dataset, "--dataset", "dataset")
            return {}
        raise ValueError(
            f"--dataset {dataset!r} does not exist: pass an existing directory of `{{split}}.{{lang}}[.gz]` files or "
            f"of one .tsv/.jsonl file per split, a `save_to_disk` directory, or a Hub dataset id such as 'wmt14'."
        )
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return {}  # a saved dataset: its splits and columns are checked when it is loaded
    tables = {}
    for split, stem in splits.items():
        table = find_table(path, stem)
        languages = line_file_languages(path, stem)
        if table is not None:
            check_rows(table)
            if table.name.removesuffix(".gz").endswith(".tsv"):
                check_table(table, _table_columns(table, checked=False))
            else:
                check_table(table)
            tables[split] = table
        elif not languages:
            found = split_stems(path)
            none = "" if split == "train" else f", or --{split}_split '' for none"  # a run needs a training split
            raise ValueError(
                f"--{split}_split {stem!r} does not exist in --dataset {dataset!r} (no {stem}.{{lang}}[.gz], no "
                f"{stem}.tsv/.jsonl file); it has the splits {found}: pass --{split}_split <one of those>{none}."
            )
        else:
            for name in ("src_lang", "tgt_lang"):
                if values[name] not in languages:
                    raise ValueError(
                        f"--{name} {values[name]!r}: there is no {stem}.{values[name]} or {stem}.{values[name]}.gz in "
                        f"{dataset!r}; split {stem!r} has the languages {languages}: pass one of those."
                    )
            for name in ("src_column", "tgt_column"):
                if values.get(name):  # the loader would read the line files by language and ignore it
                    raise ValueError(
                        f"--{name} {values[name]!r} names a column of a table, but split {stem!r} of {dataset!r} is "
                        f"line files ({stem}.{values['src_lang']}, {stem}.{values['tgt_lang']}), found by language "
                        f"code: leave --src_column and --tgt_column out."
                    )
            check_line_files(*(find_line_file(path, stem, values[name]) for name in ("src_lang", "tgt_lang")), stem)
    if "train" not in tables:
        return {}
    return table_languages(tables["train"], values, named)


def check_columns(values: dict) -> None:
    """ValueError naming the flag unless each table of --dataset has the columns the run reads, as the corpus reader
    takes them (`corpus._to_pair`): a `translation` column with the two languages, or the columns --src_column and
    --tgt_column name (by default the languages' codes). Run once the languages are known."""
    path = Path(values["dataset"]).expanduser()
    if not path.is_dir():
        return
    stems = [values["train_split"], values["validation_split"], values.get("test_split")]
    for table in filter(None, (find_table(path, stem) for stem in stems if stem)):
        columns = _row_keys(table)
        if columns is None:
            continue
        if not (values.get("src_column") or values.get("tgt_column")) and "translation" in columns:
            continue  # its languages are the loader's to check
        for flag, name in (("src_column", "src_lang"), ("tgt_column", "tgt_lang")):
            column = values.get(flag) or values[name]
            if column not in columns:
                given = f"--{flag} {column!r}" if values.get(flag) else f"--{name} {column!r} (the column's default)"
                raise ValueError(
                    f"{given}: the table {str(table)!r} has no such column; its columns are {columns}: pass "
                    f"--src_column/--tgt_column naming the source and target columns."
                )


def _row_keys(table: Path) -> list[str] | None:
    """The column names of a table from its first line (a TSV's header, a JSON Lines object's keys); None where the
    first line is not one JSON object."""
    if table.name.removesuffix(".gz").endswith(".tsv"):
        return _table_columns(table)
    opener = gzip.open if table.name.endswith(".gz") else open
    with opener(table, "rt", encoding="utf-8", newline="") as f:
        first = f.readline()
    try:
        row = json.loads(first)
    except ValueError:
        return None
    return list(row) if isinstance(row, dict) else None


def table_languages(table: Path, values: dict, named: set[str]) -> dict:
    """The languages of a table the command line and the recipe do not name: read from its two columns (or its
    `translation` column's two languages), in order, source first, when they are language codes; else a ValueError
    asking for them. A table has no languages in its file names, and a default ('en') would be recorded as the
    model's source language whatever the data is."""
    missing = [name for name in ("src_lang", "tgt_lang") if name not in named]
    if not missing:
        return {}
    columns = _table_columns(table)
    if columns is None:  # not read here (a .json array): the loader says what is wrong
        return {}
    if values.get("src_column") or values.get("tgt_column"):
        columns = [values.get("src_column"), values.get("tgt_column")]
    codes = len(columns) == 2 and all(isinstance(c, str) and LANGUAGE_CODE.match(c) for c in columns)
    if not codes:
        flags = " and ".join(f"--{name}" for name in missing)
        raise ValueError(
            f"{flags} {'is' if len(missing) == 1 else 'are'} required for the table {str(table)!r}: its columns "
            f"{columns} are not two language codes to read them from. Pass the languages (e.g. --src_lang en "
            f"--tgt_lang de), and --src_column/--tgt_column to name the columns where they are not called so."
        )
    read = dict(zip(("src_lang", "tgt_lang"), columns))
    if len(missing) == 1:  # the other language is the column the command line did not name
        other = next(name for name in read if name not in missing)
        rest = [c for c in columns if c != values[other]]
        read[missing[0]] = rest[0] if len(rest) == 1 else read[missing[0]]
    return {name: read[name] for name in missing}


def _table_columns(table: Path, checked: bool = True) -> list[str] | None:
    """The column names of a table from its first line: a TSV's header, a JSON Lines object's keys (the languages
    of its `translation` column, if it has one). None where the first line is not one JSON object. A first line that
    is not UTF-8 (`checked` False: before `check_table`) leaves its bytes replaced: `check_table` names it."""
    opener = gzip.open if table.name.endswith(".gz") else open
    with opener(table, "rt", encoding="utf-8", errors="strict" if checked else "replace", newline="") as f:
        first = f.readline()
    if table.name.removesuffix(".gz").endswith(".tsv"):
        return first.rstrip("\r\n").split("\t")
    try:
        row = json.loads(first)
    except ValueError:
        return None
    if not isinstance(row, dict):
        return None
    return list(row["translation"]) if isinstance(row.get("translation"), dict) else list(row)


def resume_value(resume):
    """`--resume_from_checkpoint` as the Trainer takes it: True for 'true' (the newest checkpoint of output_dir), None
    for 'false' or none, else the checkpoint directory given."""
    if isinstance(resume, str) and resume.lower() in ("true", "false"):
        return True if resume.lower() == "true" else None
    return resume


def stopped_before_first_checkpoint(out_dir: Path) -> bool:
    """Whether `out_dir` holds only what a run writes before its first checkpoint (BEFORE_FIRST_CHECKPOINT, and
    `checkpoint-<step>` directories whose save did not finish): no checkpoint to resume from and no final model, so a
    new run starts there (reusing the tokenizer when it was trained with the same settings)."""
    entries = list(out_dir.iterdir())
    return (
        bool(entries)
        and last_checkpoint(str(out_dir)) is None
        and all(p.name in BEFORE_FIRST_CHECKPOINT or CHECKPOINT_RE.match(p.name) for p in entries)
    )


def written_by_a_run(out_dir: Path) -> bool:
    """Whether `out_dir` looks like the output directory of a training run: the only kind --overwrite_output_dir
    empties (a mistyped --output_dir must not delete someone's files)."""
    written = ("trainer_state.json", "results.json", "tokenizer")
    return any((out_dir / name).exists() for name in written) or any(
        CHECKPOINT_RE.match(p.name) and p.is_dir() for p in out_dir.iterdir()
    )


def output_dir_problem(out_dir: Path, resume, overwrite: bool) -> str | None:
    """Why training into `out_dir` cannot start as asked, or None: the one rule of the early check (`preflight`)
    and of `train.prepare_output_dir`. Each message names the one way on that works; messages name the options
    in backticks."""
    resume = resume_value(resume)
    if isinstance(resume, str) and not Path(resume).is_dir():
        return (
            f"`resume_from_checkpoint` {resume!r} is not a directory: pass a checkpoint-<step> directory of an "
            f"earlier run, or 'true' for the newest checkpoint in `output_dir`."
        )
    entries = sorted(p.name for p in out_dir.iterdir()) if out_dir.is_dir() else []
    restartable = not entries or stopped_before_first_checkpoint(out_dir)
    if restartable:
        instead = "start without `resume_from_checkpoint`: a new run starts there"
    elif written_by_a_run(out_dir):
        instead = (
            "start again with `overwrite_output_dir` (it deletes the earlier run), or choose another `output_dir`"
        )
    else:
        instead = "it is no training run's directory: choose another `output_dir`, or empty it yourself"
    if resume is True and last_checkpoint(str(out_dir)) is None:
        return (
            f"`resume_from_checkpoint` true, but `output_dir` {str(out_dir)!r} holds no checkpoint-<step> directory to "
            f"resume from (a run saves its first one after `save_steps` updates): {instead}."
        )
    if resume or restartable:
        return None
    listing = ", ".join(entries[:6]) + (", ..." if len(entries) > 6 else "")
    if not overwrite:
        if last_checkpoint(str(out_dir)) is not None:
            instead = "continue that run with `resume_from_checkpoint` true, replace it with `overwrite_output_dir`"
            instead += ", or choose another `output_dir`"
        return f"`output_dir` {str(out_dir)!r} is not empty ({listing}): {instead}."
    if not written_by_a_run(out_dir):
        return (
            f"`overwrite_output_dir`: {str(out_dir)!r} does not look like an output directory of a training run (no "
            f"checkpoint, tokenizer/, trainer_state.json or results.json), so it is not emptied: remove it "
            f"yourself or choose another `output_dir`."
        )
    return None


def check_output_dir(values: dict) -> None:
    out_dir = Path(values["output_dir"])
    problem = writable_directory_problem(out_dir) or output_dir_problem(
        out_dir, values.get("resume_from_checkpoint"), values.get("overwrite_output_dir")
    )
    if problem:
        raise ValueError(re.sub(r"`(\w+)`", r"--\1", problem))


def writable_directory_problem(out_dir: Path) -> str | None:
    """Why the run cannot write into `out_dir`, or None: it (or a directory above it) is a file, or its nearest
    existing directory takes no new entry (tried with one created and removed at once)."""
    existing = next(path for path in (out_dir, *out_dir.parents) if path.exists() or path == Path(path.anchor or "."))
    if not existing.is_dir():
        which = "is a file" if existing == out_dir else f"is inside the file {str(existing)!r}"
        return f"`output_dir` {str(out_dir)!r} {which}: name a directory for the run (it is created if need be)."
    try:
        tempfile.TemporaryDirectory(dir=existing, prefix=".vanilla-transformer-").cleanup()
    except OSError as error:
        where = "in it" if existing == out_dir else f"in {str(existing)!r}"
        return (
            f"`output_dir` {str(out_dir)!r}: nothing can be created {where} ({error.strerror}); choose a directory "
            f"you can write to."
        )
    return None
