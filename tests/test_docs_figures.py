"""The shipped models' figures in README.md and docs/ are their own `results.json`'s and their folders' sizes: the
README table's rows are built from results.json, and each page that quotes a shipped run quotes its numbers."""

from pathlib import Path

import pytest
from helpers import PRECISION, figure_cells, shipped_results

from vanilla_transformer.translation.shipped import DEFAULT_MODEL, PRETRAINED_DIR, shipped_models


ROOT = Path(__file__).resolve().parents[1]


def readme_row(name: str) -> str:
    """README.md's row for the shipped model `name`, from its results.json."""
    return f"| `{name}` {figure_cells(shipped_results(name))}| [README.md](vanilla_transformer/pretrained/{name}/README.md) |"


def page(name: str) -> str:
    return " ".join((ROOT / name).read_text().split())  # one line: a figure may sit across a line break


def test_the_readme_table_is_the_shipped_models_results():
    lines = (ROOT / "README.md").read_text().splitlines()
    start = lines.index("<!-- shipped-models-table -->") + 3  # the marker, the header, the rule
    rows = []
    for line in lines[start:]:
        if not line.startswith("| "):
            break
        rows.append(line)
    assert rows == [readme_row(name) for name in shipped_models()]


def test_the_readme_names_the_shipped_decoding():
    decoding = shipped_results(DEFAULT_MODEL)["decoding"]
    assert f"(beam {decoding['num_beams']}, length penalty {decoding['length_penalty']})" in page("README.md")


def section(text: str, heading: str) -> str:
    """The part of `text` (one line, as `page` gives) from `heading` to the next heading of any level."""
    start = text.index(heading)
    ends = [i for i in (text.find(" ## ", start + 1), text.find(" ### ", start + 1)) if i != -1]
    return text[start : min(ends, default=len(text))]


@pytest.mark.parametrize("name", shipped_models())
def test_results_md_quotes_each_shipped_run(name):
    """docs/results.md has a section per shipped model whose figures are its results.json's and its folder's."""
    results = shipped_results(name)
    bleu, training, shipping = results["bleu"], results["training"], results["shipping"]
    text = section(page("docs/results.md"), f"### `{name}`")
    folder = PRETRAINED_DIR / name
    size = f"{sum(p.stat().st_size for p in folder.iterdir()) / 1e6:.1f} MB"
    weights = f"{(folder / 'model.safetensors').stat().st_size / 1e6:.1f} MB"
    shipped = (
        f"average of {results['checkpoint_averaging']['num_checkpoints']} (shipped)"
        if shipping["chosen"] == "averaged"
        else "final model (shipped)"
    )
    expected = [
        f"{training['train_runtime_s'] / 60:.1f} minutes, {training['steps']:,} updates ({training['epochs']:.1f} "
        f"epochs), {training['tokens_per_second']:,.0f} source + target tokens per second",
        f"{PRECISION[training['precision']['mixed_precision']]} on {training['hardware']}",
        shipped,
        *(f"| {bleu:.2f} |" for chosen, bleu in shipping["validation_bleu"].items() if chosen != shipping["chosen"]),
        f"**{bleu['validation']['score']:.2f}** (float32 weights: {shipping['float32_weights_bleu']['validation']:.2f})",
        f"| {bleu['validation']['lowercase']['score']:.2f} |",
        f"**{bleu['test']['score']:.2f}** (float32 weights: {shipping['float32_weights_bleu']['test']:.2f})",
        f"| {bleu['test']['lowercase']['score']:.2f} |",
        f"bfloat16 weights {weights}; the folder is {size} in all",
    ]
    assert [figure for figure in expected if figure not in text] == []
    decoding = results["decoding"]
    head = section(page("docs/results.md"), "## The shipped models")
    assert (
        f"decoded with its generation config (beam {decoding['num_beams']}, length penalty {decoding['length_penalty']})"
        in head
    )


@pytest.mark.parametrize("name", ["docs/performance.md", "docs/model.md"])
def test_the_float32_figures_name_the_shipped_run(name):
    """The float32 hours on CPU-C are ranges of other runs; each page that gives them also gives the shipped run's."""
    training = shipped_results(DEFAULT_MODEL)["training"]
    text = page(name)
    assert f"{training['tokens_per_second']:,.0f}" in text and f"{training['steps']:,}" in text


def test_the_shipped_folders_size_is_said_one_way():
    """docs/sharing.md says what the shipped models add to the package, in the folders' own bytes."""
    sizes = [sum(p.stat().st_size for p in (PRETRAINED_DIR / n).iterdir()) for n in shipped_models()]
    assert f"The {len(sizes)} folders hold {sum(sizes) / 1e6:.1f} MB" in page("docs/sharing.md")
