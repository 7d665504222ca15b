"""A Hugging Face Space that runs the demo for a model on the Hub: `write_space` writes its app.py, requirements.txt
(`space_requirement`: this package from its repository, `repository_url`) and README.md.
"""

from __future__ import annotations

from pathlib import Path


SPACE_APP = '''"""A Gradio Space running the vanilla-transformer demo for the model {repo_id!r}.

Written by `vanilla-transformer demo --write_space`; see docs/demo.md of vanilla-transformer.
"""

from vanilla_transformer.demo.page import build_demo, launch_demo
from vanilla_transformer.translation.loading import load_model


MODEL = {repo_id!r}
REVISION = {revision!r}

model, tokenizer = load_model(MODEL, revision=REVISION, device="cpu")
demo = build_demo(model, tokenizer, model_name=MODEL)

if __name__ == "__main__":
    launch_demo(demo, host=None, port=None)
'''

SPACE_README = """---
title: {title}
emoji: 🔤
colorFrom: blue
colorTo: indigo
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
models:
  - {repo_id}
---

The vanilla-transformer demo for [{repo_id}](https://huggingface.co/{repo_id}): translate a sentence, look at its
attention, step through the beam search, read the word alignment.
"""


def repository_url() -> str | None:
    """The project's repository as the installed package's metadata records it (`Repository` in pyproject.toml's
    `[project.urls]`), or None where it records none."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        entries = metadata("vanilla-transformer").get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository" and url.strip():
            return url.strip()
    return None


def space_requirement(requirement: str | None = None) -> str:
    """The line of the Space's requirements.txt that installs this package with its demo extra: `requirement`, or
    the project's repository as a git URL. The package is not on PyPI, so a bare `vanilla-transformer[demo]` would
    not resolve; without a repository URL in the package's metadata `requirement` must be given."""
    if requirement is None:
        url = repository_url()
        if url is None:
            raise ValueError(
                "--write_space needs --requirement: vanilla-transformer is not on PyPI and this installation records "
                "no repository URL, so say how the Space installs it, e.g. --requirement "
                "'vanilla-transformer[demo] @ git+https://github.com/YOUR_NAME/vanilla-transformer'."
            )
        requirement = f"vanilla-transformer[demo] @ git+{url}"
    if not requirement.strip() or "\n" in requirement:
        raise ValueError(f"--requirement {requirement!r}: pass one requirement line (a pip requirement or URL).")
    return requirement.strip()


def write_space(directory, repo_id: str, *, revision: str | None = None, requirement: str | None = None) -> Path:
    """Write a Gradio Space for the Hub model `repo_id` into `directory` (created; must be empty if it exists):
    `app.py` (loads the model and runs this demo), `requirements.txt` (`space_requirement(requirement)`: the package
    with its demo extra, from a `git+https://...` URL or wherever `requirement` says) and `README.md` (the Space's
    metadata). Upload it with `hf upload --repo-type space NAME DIRECTORY`."""
    if not isinstance(repo_id, str) or not repo_id.strip() or repo_id.count("/") > 1:
        raise ValueError(
            f"--model {repo_id!r}: a Space loads its model from the Hub; pass a repo id 'namespace/name'."
        )
    path = Path(directory)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(f"--write_space {str(directory)!r} exists and is not an empty directory: pass a new one.")
    requirement = space_requirement(requirement)
    try:
        from importlib.metadata import version

        gradio_version = version("gradio")
    except Exception:
        gradio_version = "6.31.0"
    path.mkdir(parents=True, exist_ok=True)
    (path / "app.py").write_text(SPACE_APP.format(repo_id=repo_id, revision=revision), encoding="utf-8")
    (path / "requirements.txt").write_text(f"{requirement}\ngradio=={gradio_version}\n", encoding="utf-8")
    title = repo_id.split("/")[-1][:30]
    (path / "README.md").write_text(
        SPACE_README.format(title=title, gradio_version=gradio_version, repo_id=repo_id), encoding="utf-8"
    )
    return path


__all__ = ["SPACE_APP", "SPACE_README", "repository_url", "space_requirement", "write_space"]
