"""Publishing a trained model on the Hugging Face Hub.

`ensure_repo(repo_id, ...)` runs before anything is trained (`train` calls it when `--push_to_hub` is set), and
`push_run` before anything is uploaded: both first check the token and the namespace, and fail with a `ValueError`
that says what to do when there is no token, when the token is invalid or read-only, or when it cannot write to the
repo's namespace, instead of failing hours later at the first push.

`push_run(output_dir, repo_id)` uploads a training run's output directory (or any `save_pretrained` directory that
also holds the tokenizer) in ONE commit, with `HfApi.upload_folder`. What goes up is decided here, file by file
(`files_to_push`), and given to `upload_folder` as its allow patterns:

    config.json                      with `auto_map` (and `custom_pipelines`), the remote-code entry points
    generation_config.json           the decoding the run saved (beam size, length penalty; source length + 50)
    model.safetensors                (or model.safetensors.index.json and its shards); safetensors only
    *.py                             the remote code: the modules named in `auto_map` and `custom_pipelines`
                                     and the modules they import relatively, nothing else
    tokenizer.json, tokenizer_config.json, special_tokens_map.json, ...   the tokenizer files that exist
    README.md                        the model card, rendered from results.json (see below)
    results.json, *.png              the run's scores and plots (training/report.py)

and nothing else: no `checkpoint-*` folders, optimizer/scheduler/RNG states, training_args.bin,
trainer_state.json, TensorBoard `runs/`, test hypotheses (`*.hyp.*`), nor the `tokenizer/` and `averaged/`
sub-folders of a `vanilla-transformer train` run. The Trainer's own pushes during training (`hub_strategy`) upload its whole output
directory; with `prune=True` (the default) the commit also deletes such training files from the repo
(`NEVER_PUBLISHED`, as `upload_folder`'s delete patterns), so that the published revision holds exactly the files
above (plus the Hub's `.gitattributes`).

The model card, written by `model_card` into `output_dir/README.md` before the upload (as the Trainer writes its
card before it pushes), so that the directory holds what the repo holds: with a results JSON (the `results`
argument, copied to `output_dir/results.json`, else that file), `render_model_card` (BLEU, signature, data,
hyper-parameters). Without one, an existing `output_dir/README.md` is uploaded as it is, and if there is none
either, `render_unevaluated_card` (metadata and usage only) and a warning: a model can be published before it is
evaluated, but the card then says that it has not been.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

from huggingface_hub import HfApi, constants
from huggingface_hub.errors import HfHubHTTPError
from huggingface_hub.utils import get_token

from ..checkpoints import TRAINING_STATE_FILES
from ..configuration_vanilla_transformer import VanillaTransformerConfig
from ..translation.shipped import PRETRAINED_DIR


logger = logging.getLogger(__name__)

DEFAULT_COMMIT_MESSAGE = "Upload model trained with vanilla-transformer"
MODEL_TYPE = VanillaTransformerConfig.model_type

SAFE_WEIGHTS_NAME = constants.SAFETENSORS_SINGLE_FILE  # model.safetensors
SAFE_WEIGHTS_INDEX_NAME = constants.SAFETENSORS_INDEX_FILE  # model.safetensors.index.json
# Every file a transformers tokenizer may write with save_pretrained; those that exist are published.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "sentencepiece.bpe.model",
    "chat_template.jinja",
    "chat_template.json",
)
RESULTS_NAME = "results.json"
CARD_NAME = constants.REPOCARD_NAME  # README.md
# Files and folders of a training run that are never published, and that `prune=True` deletes from the repo when
# the Trainer's pushes during training put them there (it uploads its whole output_dir but `checkpoint-*`).
NEVER_PUBLISHED = (
    *TRAINING_STATE_FILES,
    "all_results.json",
    "train_results.json",
    "eval_results.json",
    "*.hyp.*",
    "*tfevents*",
    "pytorch_model*.bin",
    "checkpoint-*/*",
    "tmp-checkpoint-*/*",
    "last-checkpoint/*",
    "runs/*",
    "tokenizer/*",
    "averaged/*",
)
_COMMIT_SHA = re.compile(r"^[0-9a-f]{40}$")


# ------------------------------------------------------------------------------------------------ access


def _token_source(token) -> str:
    if token is not None:
        return "the `token` argument"
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return "the HF_TOKEN environment variable"
    return "the saved login (`hf auth login`)"


def resolve_token(token: str | bool | None = None) -> str:
    """The token to write with: `token` if given, else the HF_TOKEN environment variable, else the saved login.

    Raises ValueError when there is none (`token=False` means "no token" and raises too: writing needs one).
    """
    if token is None or token is True:
        token = get_token()
    elif token is not False and not isinstance(token, str):
        raise ValueError(f"`token` must be a string (a Hugging Face access token), got {type(token).__name__}.")
    if not token:
        raise ValueError(
            "No Hugging Face token was found, and pushing to the Hub needs one with write access: pass `token=...` "
            "(`--token` / `--hub_token` on the command line), set the HF_TOKEN environment variable, or log in "
            "once with `hf auth login`. Tokens are created at https://huggingface.co/settings/tokens."
        )
    return token


def _split_repo_id(repo_id) -> tuple[str | None, str]:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
        if not repo_id:
            raise HFValidationError("it is empty")
    except HFValidationError as error:
        raise ValueError(
            f"`repo_id`={repo_id!r} is not a Hub model id ({error}): use 'namespace/name' (e.g. 'your-name/"
            f"transformer-en-de'), or a bare 'name' for your own namespace."
        ) from None
    namespace, _, name = repo_id.rpartition("/")
    return namespace or None, name


def _whoami(api: HfApi, token: str, given) -> dict:
    if constants.is_offline_mode():
        raise ValueError(
            "The Hugging Face client is in offline mode (HF_HUB_OFFLINE=1 or TRANSFORMERS_OFFLINE=1), so nothing can "
            "be pushed: unset these variables for the run that pushes."
        )
    try:
        return api.whoami(token=token)
    except HfHubHTTPError as error:
        if error.response is not None and error.response.status_code == 401:
            raise ValueError(
                f"The Hugging Face token from {_token_source(given)} is invalid or expired (the Hub answered 401 to "
                f"whoami): create a token with write access at https://huggingface.co/settings/tokens and pass it "
                f"with `token=` / `--token`, set HF_TOKEN, or run `hf auth login --force`."
            ) from None
        raise


def _access(repo_id: str, token, api: HfApi) -> tuple[str, str]:
    """(full repo id, token), once the token can write to `repo_id`'s namespace. The token is `token`, else HF_TOKEN,
    else the saved login (`hf auth login`). Raises ValueError, with what to do, when there is no token, when the Hub
    rejects it (401 from `whoami`), when it is read-only, when the client is offline, or when the namespace is neither
    the token's user nor one of their organizations. A bare `repo_id` ("name") is taken in the user's namespace, as
    `create_repo` does. Creates nothing."""
    namespace, name = _split_repo_id(repo_id)
    resolved = resolve_token(token)
    info = _whoami(api, resolved, token)
    user = info.get("name")
    orgs = [org.get("name") for org in info.get("orgs") or []]
    role = ((info.get("auth") or {}).get("accessToken") or {}).get("role")
    if role == "read":
        raise ValueError(
            f"The Hugging Face token from {_token_source(token)} (user {user!r}) is read-only: pushing needs a token "
            f"with write access; create one at https://huggingface.co/settings/tokens."
        )
    namespace = namespace or user
    if namespace != user and namespace not in orgs:
        member_of = f"organizations {orgs}" if orgs else "no organization"
        raise ValueError(
            f"`repo_id`={repo_id!r} is in the namespace {namespace!r}, where the token's user {user!r} (member of "
            f"{member_of}) cannot write: use '{user}/{name}', a namespace of one of your organizations, or a token "
            f"of an account that owns {namespace!r}."
        )
    return f"{namespace}/{name}", resolved


def ensure_repo(repo_id: str, *, private: bool = False, revision: str | None = None, token: str | None = None) -> str:
    """Create the model repo if missing (private if asked) and the branch `revision` if missing; return the repo id.

    The Trainer creates the repo but never a branch, so `hub_revision` needs this before training pushes to it.
    An existing public repo is not made private behind the user's back: with `private=True` that is an error.
    """
    api = HfApi()
    repo_id, token = _access(repo_id, token, api)
    return _ensure_repo(api, repo_id, token, private, revision)


def _ensure_repo(api: HfApi, repo_id: str, token: str, private: bool, revision: str | None) -> str:
    _check_revision(revision)
    repo_id = api.create_repo(repo_id, private=private, exist_ok=True, token=token, repo_type="model").repo_id
    if private and not api.model_info(repo_id, token=token).private:
        raise ValueError(
            f"`private=True` but the repo {repo_id!r} already exists and is public (visibility is only chosen when a "
            f"repo is created): make it private first (`HfApi().update_repo_settings({repo_id!r}, private=True)` or "
            f"the repo's settings page), or push without `private` / `--private`."
        )
    if revision is not None and revision != "main" and not revision.startswith("refs/pr/"):
        api.create_branch(repo_id, branch=revision, exist_ok=True, token=token, repo_type="model")
    return repo_id


def _check_revision(revision) -> None:
    if revision is None:
        return
    if not isinstance(revision, str) or not revision.strip() or _COMMIT_SHA.match(revision):
        raise ValueError(
            f"`revision`={revision!r} must be a branch name (created from main if it does not exist) or 'refs/pr/N', "
            f"not a commit id: commits go on top of a branch."
        )


# ------------------------------------------------------------------------------------------------ what is pushed


def _module_file(reference: str) -> str:
    # auto_map values are "module.Class" (or "repo--module.Class" for code that lives in another repo).
    if "--" in reference:
        raise ValueError(
            f"config.json refers to code in another repository ({reference!r}): this package publishes its own code; "
            f"re-save the model with `save_pretrained` after `import vanilla_transformer`."
        )
    return reference.rsplit(".", 1)[0] + ".py"


def _remote_code_files(output_dir: Path, config: dict) -> list[str]:
    """The .py files a remote-code load needs: the modules of `auto_map` and `custom_pipelines` and, recursively,
    what they import relatively (what transformers copies and loads, `dynamic_module_utils`)."""
    from transformers.dynamic_module_utils import get_relative_imports

    auto_map = config.get("auto_map")
    if not auto_map:
        raise ValueError(
            f"{output_dir / 'config.json'} has no `auto_map`, so the model would not load where this package is not "
            f"installed: load it with `VanillaTransformerForConditionalGeneration.from_pretrained` and save it again "
            f"with `save_pretrained` after `import vanilla_transformer` (which registers the classes)."
        )
    references = []
    for value in auto_map.values():
        references.extend(v for v in (value if isinstance(value, (list, tuple)) else [value]) if v)
    pipelines = config.get("custom_pipelines") or {}
    if "translation" not in pipelines:
        logger.warning(
            "%s has no `custom_pipelines['translation']`: `pipeline('translation', model=<repo>, "
            "trust_remote_code=True)` will not work with this upload (re-save the model with a version of this "
            "package that ships pipeline_vanilla_transformer.py).",
            output_dir / "config.json",
        )
    references.extend(entry["impl"] for entry in pipelines.values() if isinstance(entry, dict) and entry.get("impl"))
    files, todo = [], [(_module_file(ref), "config.json") for ref in references]
    while todo:  # the named modules, then what they import with `from .x import` (one directory, as transformers)
        name, needed_by = todo.pop(0)
        if name in files:
            continue
        path = output_dir / name
        if not path.is_file():
            raise ValueError(
                f"{needed_by} names code in {name!r} but {path} does not exist: the directory is incomplete; re-save "
                f"the model with `save_pretrained` after `import vanilla_transformer`."
            )
        files.append(name)
        todo += [(module + ".py", name) for module in get_relative_imports(str(path))]
    return files


def files_to_push(output_dir) -> dict[str, Path]:
    """The files of `output_dir` that `push_run` uploads, path in repo -> local path (README.md not included: the
    card is rendered at push time). Raises ValueError, naming what is missing, for an incomplete directory."""
    out = Path(output_dir)
    if not out.is_dir():
        raise ValueError(
            f"`output_dir`={str(output_dir)!r} is not a directory: pass the --output_dir of `vanilla-transformer train` or "
            f"a `save_pretrained` directory that also holds the tokenizer."
        )
    config_path = out / "config.json"
    if not config_path.is_file():
        raise ValueError(
            f"`output_dir`={str(output_dir)!r} has no config.json: it is not a saved model (`vanilla-transformer "
            f"train` writes the final model at the top of its --output_dir when training ends)."
        )
    config = json.loads(config_path.read_text(encoding="utf-8"))
    if config.get("model_type") != MODEL_TYPE:
        raise ValueError(
            f"{config_path} is a {config.get('model_type')!r} model, not a {MODEL_TYPE!r} one: "
            f"`push_run` publishes models of this package; use `model.push_to_hub` for others."
        )
    files = ["config.json"]
    if (out / "generation_config.json").is_file():
        files.append("generation_config.json")
    else:
        logger.warning(
            "%s has no generation_config.json: the repo will decode with transformers' defaults "
            "(greedy, at most 20 tokens) instead of the paper's beam search.",
            out,
        )
    if (out / SAFE_WEIGHTS_NAME).is_file():
        files.append(SAFE_WEIGHTS_NAME)
    elif (out / SAFE_WEIGHTS_INDEX_NAME).is_file():
        index = json.loads((out / SAFE_WEIGHTS_INDEX_NAME).read_text(encoding="utf-8"))
        files += [SAFE_WEIGHTS_INDEX_NAME, *sorted(set(index["weight_map"].values()))]
    else:
        raise ValueError(
            f"`output_dir`={str(output_dir)!r} has no {SAFE_WEIGHTS_NAME}: only safetensors weights are "
            f"published (they cannot run code when loaded); save the model with `save_pretrained`."
        )
    files += _remote_code_files(out, config)
    if not (out / "tokenizer_config.json").is_file() or not (out / "tokenizer.json").is_file():
        raise ValueError(
            f"`output_dir`={str(output_dir)!r} has no tokenizer (tokenizer.json and "
            f"tokenizer_config.json): save it beside the model with "
            f"`tokenizer.save_pretrained(output_dir)`; a model without its tokenizer cannot translate."
        )
    files += [name for name in TOKENIZER_FILES if (out / name).is_file()]
    if (out / RESULTS_NAME).is_file():
        files.append(RESULTS_NAME)
    files += sorted(p.name for p in out.glob("*.png") if p.is_file())
    missing = [name for name in files if not (out / name).is_file()]
    if missing:
        raise ValueError(f"`output_dir`={str(output_dir)!r} lacks {missing}, which its config or index names.")
    return {name: out / name for name in dict.fromkeys(files)}


def _card(out: Path, repo_id: str, results):
    """(model card, results JSON bytes) to write into `out` before the upload; None: leave that file as it is."""
    from .model_card import load_results, render_model_card, render_unevaluated_card

    if results is None and (out / RESULTS_NAME).is_file():
        results = out / RESULTS_NAME
    if results is not None and results is not False:
        loaded = load_results(results)
        # A shipped model's card also says how the package names it (vanilla_transformer/translation/shipped.py).
        shipped_name = loaded.get("name") if loaded.get("shipping") else None
        config = VanillaTransformerConfig.from_pretrained(out)
        card = render_model_card(config, loaded, repo_id, shipped_name=shipped_name)
        if isinstance(results, dict):
            return card, (json.dumps(results, indent=2, default=str) + "\n").encode()
        return card, None if Path(results).resolve() == (out / RESULTS_NAME).resolve() else Path(results).read_bytes()
    if (out / CARD_NAME).is_file():
        logger.info("No results JSON: uploading the existing %s as the model card.", out / CARD_NAME)
        return None, None
    logger.warning("No results JSON in %s: the model card says that the model has not been evaluated.", out)
    return render_unevaluated_card(repo_id), None


def push_run(
    output_dir,
    repo_id: str,
    *,
    private: bool = False,
    revision: str | None = None,
    token: str | None = None,
    commit_message: str = DEFAULT_COMMIT_MESSAGE,
    results=None,
    prune: bool = True,
) -> str:
    """Upload a trained model's directory to the Hub in one commit; return the commit URL (it ends in the sha).

    Args:
        output_dir: the `--output_dir` of `vanilla-transformer train`, or any `save_pretrained` directory of this package's model that also
            holds its tokenizer (e.g. `averaged/`). What is uploaded: see the module docstring and `files_to_push`.
        repo_id: "namespace/name" (or "name" for the token's user). Created if missing.
        private: create the repo private. An existing public repo is an error with `private=True`.
        revision: the branch to commit to, created from main if missing; default main.
        token: the Hub token (default HF_TOKEN, else the saved login). Checked before anything is uploaded.
        commit_message: the commit's title.
        results: the results dict or JSON path the card is written from; default `output_dir/results.json`. Without
            results, an existing README.md is uploaded as is, else a card that says there are no results.
        prune: also delete, in the same commit, training files (checkpoints, training_args.bin, TensorBoard runs,
            hypotheses, ...) that the Trainer's pushes during training left in the repo.
    """
    files = files_to_push(output_dir)  # a bad directory fails before any network call
    _check_revision(revision)
    api = HfApi()
    repo_id, token = _access(repo_id, token, api)
    out = Path(output_dir)
    card, results_bytes = _card(out, repo_id, results)  # bad results fail before the repo is created
    repo_id = _ensure_repo(api, repo_id, token, private, revision)
    with contextlib.ExitStack() as stack:
        if out.resolve().is_relative_to(PRETRAINED_DIR):
            # A model shipped in the package: its card for this repo is written into a copy; the package's folder
            # stays as it was installed.
            staging = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            for name, path in files.items():
                shutil.copy2(path, staging / name)
            out = staging
        if card is not None:
            card.save(out / CARD_NAME)
        if results_bytes is not None:
            (out / RESULTS_NAME).write_bytes(results_bytes)
        published = [*files, CARD_NAME, *([RESULTS_NAME] if results_bytes is not None else [])]
        # Patterns are matched against whole paths, and "*" also matches "/": "averaged/x.png" is not "x.png", but a
        # training file is deleted wherever it is in the repo.
        commit = api.upload_folder(
            repo_id=repo_id,
            folder_path=out,
            revision=revision,
            token=token,
            commit_message=commit_message,
            allow_patterns=[glob.escape(name) for name in dict.fromkeys(published)],
            delete_patterns=[*NEVER_PUBLISHED, *(f"*/{pattern}" for pattern in NEVER_PUBLISHED)] if prune else None,
        )
    logger.info("Pushed %s to %s (%d files): %s", output_dir, repo_id, len(set(published)), commit.commit_url)
    return commit.commit_url


__all__ = [
    "DEFAULT_COMMIT_MESSAGE",
    "NEVER_PUBLISHED",
    "TRAINING_STATE_FILES",
    "ensure_repo",
    "files_to_push",
    "push_run",
    "resolve_token",
]
