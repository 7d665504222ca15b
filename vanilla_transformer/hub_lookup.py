"""Whether a name that is no folder here names a Hub repo: asked once, before transformers or `datasets` ask.

Both libraries take a name that is not a local folder for a Hub repo id and ask the Hub for its files, each request
retried with back-off: a mistyped path (`runs/en_de` where there is no `runs/`) took 50 seconds and 46 lines of
retries to fail where the Hub cannot be reached. `check_hub_name` asks the Hub once, with a short timeout, for the
repo's metadata (offline, HF_HUB_OFFLINE=1, the Hub cache answers), and refuses a name that is neither in one line
that names both readings: no such folder here, and no such repo. Imports huggingface_hub only, inside the
functions (no torch): the command line calls it before anything loads.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path


LOOKUP_TIMEOUT_S = 10  # one metadata request: the Hub answers in well under a second when it can be reached
FOUND, MISSING, UNREACHABLE = "found", "missing", "unreachable"


def _cache_entries(repo_type: str) -> list[str]:
    """The Hub cache's folder names of `repo_type` repos (`models--NAMESPACE--NAME`)."""
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    prefix = f"{repo_type}s--"
    return [p.name for p in cache.iterdir() if p.name.startswith(prefix)] if cache.is_dir() else []


def _datasets_cache() -> Path:
    """Where `datasets` keeps the Hub datasets it has prepared (its own cache, beside the Hub's), as it finds it."""
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "huggingface"
    )
    return Path(os.environ.get("HF_DATASETS_CACHE") or os.path.join(home, "datasets")).expanduser()


def in_cache(name: str, repo_type: str = "model") -> bool:
    """Whether this machine holds a copy of the Hub repo `name`: the Hub cache's folder of it (and, for a dataset,
    `datasets`' own prepared copy, which it loads offline too)."""
    if f"{repo_type}s--{name.replace('/', '--')}" in _cache_entries(repo_type):
        return True
    return repo_type == "dataset" and (_datasets_cache() / name.replace("/", "___")).is_dir()


def known_namespace(name: str, repo_type: str = "model") -> bool:
    """Whether the first part of `name` ('NAMESPACE/NAME') is a Hub namespace this machine knows offline: one of a
    repo in the Hub cache. Offline, a name with a slash whose first part is no known namespace reads as a path."""
    if "/" not in name:
        return False
    namespace = name.split("/", 1)[0]
    return any(entry.split("--")[1] == namespace for entry in _cache_entries(repo_type) if entry.count("--") >= 2)


@functools.lru_cache(maxsize=32)
def ask_hub(name: str, repo_type: str = "model") -> tuple[str, str]:
    """(FOUND, MISSING or UNREACHABLE, the reason in words): the Hub's answer about the repo `name`, asked once with
    a timeout of LOOKUP_TIMEOUT_S and no retry; remembered, so that a command's second check asks nothing."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, RepositoryNotFoundError

    try:
        HfApi().repo_info(name, repo_type=repo_type, timeout=LOOKUP_TIMEOUT_S)
    except GatedRepoError:  # it exists; whether the token may read it is the loader's to say
        return FOUND, "gated"
    except RepositoryNotFoundError:
        return MISSING, "no such repo"
    except HfHubHTTPError as error:
        status = getattr(getattr(error, "response", None), "status_code", None)
        if status == 404:
            return MISSING, "no such repo"
        return UNREACHABLE, " ".join(str(error).split())[:160]
    except Exception as error:  # no network, DNS, a timeout, a proxy: the name could not be looked up
        return UNREACHABLE, f"{type(error).__name__}: {' '.join(str(error).split())[:160]}"
    return FOUND, ""


def check_hub_name(name: str, option: str, repo_type: str = "model") -> None:
    """ValueError naming `option` unless `name`, which is no folder here, is a Hub repo of `repo_type` that can be
    loaded: in the Hub cache, or found by one request (`ask_hub`). The message names both readings of the name."""
    from huggingface_hub import constants

    kind = "dataset" if repo_type == "dataset" else "model repo"
    if constants.HF_HUB_OFFLINE:
        if in_cache(name, repo_type):
            return
        if "/" in name and not known_namespace(name, repo_type):
            raise ValueError(
                f"{option} {name!r}: no such folder here (and, the Hub being offline with HF_HUB_OFFLINE=1, no Hub "
                f"{kind} of that name in the cache): check the path."
            )
        raise ValueError(
            f"{option} {name!r}: no folder of that name here, and the Hub {kind} {name!r} is not in the Hub cache "
            f"while the Hub is offline (HF_HUB_OFFLINE=1): check the path, or unset HF_HUB_OFFLINE to download it."
        )
    answer, reason = ask_hub(name, repo_type)
    if answer == FOUND or (answer == UNREACHABLE and in_cache(name, repo_type)):
        return
    if answer == MISSING:
        raise ValueError(
            f"{option} {name!r}: no folder of that name here, and no Hub {kind} of that name (or it is private and "
            f"this machine is not logged in: `hf auth login`): check the path or the repo id."
        )
    raise ValueError(
        f"{option} {name!r}: no folder of that name here, and the Hub could not be reached to look for a {kind} of "
        f"that name ({reason}): check the path, or the network."
    )


__all__ = ["LOOKUP_TIMEOUT_S", "ask_hub", "check_hub_name", "in_cache", "known_namespace"]
