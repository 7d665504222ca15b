"""Load a model and its tokenizer for a command (`translate`, `attention`, `export ctranslate2`, the benchmarks).

`load_model(MODEL)` takes a shipped model's short name (`vanilla_transformer/translation/shipped.py`), a checkpoint directory
(`vanilla-transformer train`'s `--output_dir`, `averaged/`, a `checkpoint-N`, any `save_pretrained` directory with
the tokenizer beside the model) or a Hub repo id, and returns the model on the chosen device in eval mode with its
tokenizer. Before transformers is asked, `check_model_location` tells apart the
mistakes a person makes with a directory, each with its own one-line message naming the option: a path that does not
exist (transformers would call it a malformed repo id), a training run with no model saved yet (it would try the
Hub), a model saved without its tokenizer (it would ask for sentencepiece).

torch and transformers are imported inside the functions: the command line imports this module to build its parsers
(`DTYPES`), and `--help` must not wait for them.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

from ..hub_lookup import check_hub_name
from .shipped import closest_shipped, resolve_model, shipped_models


logger = logging.getLogger(__name__)

DTYPES = ("auto", "float32", "bfloat16", "float16")
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"  # what this package's tokenizer saves (a fast tokenizer)


def looks_like_a_path(model: str) -> bool:
    """Whether `model` is meant as a local directory rather than a Hub repo id ('name' or 'namespace/name'): it is
    absolute, starts with ./ ../ or ~, has more than one slash (or a Windows separator), or its first part exists
    here (`runs/en-de` where `runs/` exists)."""
    if model in (".", "..") or os.path.isabs(model) or model.startswith(("./", "../", "~")):
        return True
    if any(sep in model for sep in {os.sep, os.altsep} - {None, "/"}) or model.count("/") > 1:
        return True
    return "/" in model and Path(model.split("/")[0]).is_dir()


def _natural_key(path: Path):
    # checkpoint-900 before checkpoint-1000
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def check_model_location(model: str, option: str = "--model") -> None:
    """ValueError naming `option` when `model` is a local path that holds no loadable model: a path that does not
    exist, a file, a directory without `config.json` (e.g. a training run that has only written `checkpoint-N`
    directories so far: they are suggested), or a model directory without its tokenizer. A Hub repo id passes."""
    path = Path(model).expanduser()
    if not path.exists():
        if looks_like_a_path(model):
            raise ValueError(
                f"{option} {model!r} could not be loaded: no such directory. Pass a directory written by `vanilla-transformer train` "
                f"or `save_pretrained`, or a Hub repo id 'namespace/name'."
            )
        check_hub_id(model, option)
        return  # a Hub repo id: transformers looks it up
    if not path.is_dir():
        raise ValueError(f"{option} {model!r} is a file: pass the directory that holds {CONFIG_FILE} and the weights.")
    if not (path / CONFIG_FILE).is_file():
        models = sorted((child for child in path.iterdir() if (child / CONFIG_FILE).is_file()), key=_natural_key)
        if models:
            example = f"{option} {models[-1]}" if option.startswith("-") else str(models[-1])
            raise ValueError(
                f"{option} {model!r} holds no model (no {CONFIG_FILE}) but models in its subdirectories "
                f"({', '.join(child.name for child in models)}): pass one of them, e.g. {example}."
            )
        contents = sorted(child.name + ("/" if child.is_dir() else "") for child in path.iterdir())
        held = ", ".join(contents[:8]) + (", ..." if len(contents) > 8 else "") if contents else "nothing"
        raise ValueError(
            f"{option} {model!r} holds no model (no {CONFIG_FILE}; it holds {held}): pass a directory written by "
            f"`vanilla-transformer train` (once it has saved a model) or `save_pretrained`."
        )
    # A sentencepiece model (*.model) or a vocabulary file is a tokenizer of another kind that transformers loads.
    if not (path / TOKENIZER_FILE).is_file() and not any(path.glob("*.model")) and not any(path.glob("vocab.*")):
        raise ValueError(
            f"{option} {model} has no tokenizer ({TOKENIZER_FILE}): save the tokenizer beside the model "
            f"(tokenizer.save_pretrained({str(model)!r}))."
        )


def check_hub_id(model: str, option: str = "--model") -> None:
    """ValueError naming `option` for a `model` that is neither a local path nor a Hub repo id this machine can
    load: a name close to a shipped model's (a typo: did you mean), an id that huggingface_hub's own validation
    refuses, or a repo that the Hub (asked once) does not hold, or, with HF_HUB_OFFLINE=1, the Hub cache
    (`hub_lookup.check_hub_name`). Each is one line, before transformers is imported (it would answer with lines
    about connecting to the Hub, each request retried)."""
    shipped = closest_shipped(model) if "/" not in model else None
    if shipped is not None:
        raise ValueError(
            f"{option} {model!r}: no such model (not a directory, not a shipped model); did you mean {shipped}?"
        )
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model)
    except HFValidationError as error:
        message = " ".join(str(error).split())
        raise ValueError(
            f"{option} {model!r}: no such model: not a directory, not a shipped model "
            f"({', '.join(shipped_models()) or 'none'}) and not a valid Hub repo id ({message})"
        ) from None
    # One request (or, offline, the cache) instead of transformers' retried requests for each file of the model.
    check_hub_name(model, option, "model")


def _cannot_load(model: str, error: Exception, option: str = "--model") -> ValueError:
    """The plain error for a model that transformers could not load (a Hub repo that does not exist, no network,
    code that needs `trust_remote_code`, ...)."""
    if "trust_remote_code" in str(error):
        return ValueError(
            f"{option} {model!r} needs its own code, which this package does not provide: add --trust_remote_code "
            f"if you trust the code of that checkpoint (read its .py files first)."
        )
    return ValueError(
        f"{option} {model!r} could not be loaded ({type(error).__name__}: {error}): pass a directory written by "
        f"`vanilla-transformer train` or `save_pretrained` (with the tokenizer saved beside the model), or a Hub repo id such as "
        f"'your-name/transformer-en-de' (with --revision for a branch)."
    )


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


def load_config(model: str, *, revision: str | None = None, trust_remote_code: bool = False):
    """The config of `model` (checkpoint directory or Hub repo), without its weights: what a command checks its
    options against (e.g. `attention --layer`) before the model is loaded."""
    model = resolve_model(model)
    check_model_location(model)
    from transformers import AutoConfig

    from ..registration import register

    register()  # the config class with AutoConfig (deferred when the command line started the process)
    try:
        return AutoConfig.from_pretrained(model, revision=revision, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as error:
        raise _cannot_load(model, error) from None


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
    if dtype not in DTYPES:
        raise ValueError(f"--dtype {dtype!r} is not one of {list(DTYPES)}.")
    model = resolve_model(model)  # a shipped model's short name
    check_model_location(model)  # plain messages for a wrong directory, before transformers guesses at it
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from ..precision import fast_attention_implementation, resolve_dtype
    from ..registration import register

    register()  # the config and model with the Auto classes (deferred when the command line started the process)
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
    except (OSError, ValueError) as error:  # a repo that does not exist, a malformed id, no network, ...
        raise _cannot_load(model, error) from None
    return seq2seq.to(target).eval(), tokenizer


__all__ = [
    "DTYPES",
    "check_hub_id",
    "check_model_location",
    "load_config",
    "load_model",
    "looks_like_a_path",
    "resolve_device",
]
