"""The shipped models' figures in README.md and docs/ are their own `results.json`'s and their folders' sizes: the
README table's rows are built from results.json, and each page that quotes a shipped run quotes its numbers. The
measured Table 3 on docs/table3.md is the table its command wrote."""

import re
from pathlib import Path

import pytest
from helpers import PRECISION, figure_cells, shipped_results

from vanilla_transformer.translation.shipped import DEFAULT_MODEL, PRETRAINED_DIR, shipped_models


ROOT = Path(__file__).resolve().parents[1]


def readme_row(name: str) -> str:
    """README.md's row for the shipped model `name`, from its results.json."""
    return f"| `{name}` {figure_cells(shipped_results(name))}| [README.md](vanilla_transformer/pretrained/{name}/README.md) |"


def folder_megabytes(name: str) -> float:
    """The shipped model `name`'s folder, in MB (its files' own bytes, as the pages give them)."""
    return sum(p.stat().st_size for p in (PRETRAINED_DIR / name).iterdir()) / 1e6


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
    size = f"{folder_megabytes(name):.1f} MB"
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


@pytest.mark.parametrize("name", shipped_models())
def test_the_throughput_table_has_each_shipped_hour(name):
    """performance.md's table of hours gives each shipped model's tokens per second and updates on its machine's row."""
    training = shipped_results(name)["training"]
    text = (ROOT / "docs/performance.md").read_text().split("\n## Training throughput of the Multi30k recipes\n")[1]
    precision = PRECISION[training["precision"]["mixed_precision"]]
    table = [line.split(" | ") for line in text.split("\n## ")[0].splitlines() if line.startswith("| CPU-")]
    rows = [" | ".join(cells) for cells in table if cells[1].startswith(precision)]
    assert any(f"{training['tokens_per_second']:,.0f}" in row and f"{training['steps']:,}" in row for row in rows), (
        f"docs/performance.md gives no {precision} row with {name}'s hour"
    )


def test_the_shipped_folders_size_is_said_one_way():
    """docs/sharing.md says what the shipped models add to the package, in the folders' own bytes."""
    sizes = [folder_megabytes(name) for name in shipped_models()]
    assert f"The {len(sizes)} folders hold {sum(sizes):.1f} MB" in page("docs/sharing.md")


def test_each_attention_figure_is_drawn_by_the_command_above_it():
    """A figure's alt text names its layer ("Cross-attention, layer 2"): the command in the block above it draws that
    layer (without `--layer`, the command draws every layer: not the picture shown)."""
    for name in ("README.md", "docs/attention.md"):
        text = (ROOT / name).read_text()
        for match in re.finditer(r"!\[[^\]]*layer (\d+)\]\((?:docs/)?(attention_\w+\.png)\)", text):
            block = text[: match.start()].rsplit("```", 2)[-2]  # the code block before the figure
            lines = [line for line in re.sub(r"\\\s*\n\s*", " ", block).splitlines() if "attention --model" in line]
            drawn = [line for line in lines if match[2] in line or name == "README.md"]
            assert drawn and all(f"--layer {match[1]}" in line for line in drawn), (name, match[0], lines)


def table_cells(path: Path, heading: str) -> dict[str, dict[str, str]]:
    """The first table after `heading` in `path`, as {row: {column title: cell}}."""
    lines = path.read_text().split(heading, 1)[1].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| row |"))
    titles = [cell.strip() for cell in lines[start].strip("|").split("|")]
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("| "):
            break
        cells = dict(zip(titles, (cell.strip() for cell in line.strip("|").split("|"))))
        rows[cells["row"]] = cells
    return rows


def test_the_table3_page_quotes_the_measured_table():
    """docs/table3.md's measured table gives every row of the command's own table (seeds, params and the three
    measures, cell for cell), and no other row."""
    measured = ROOT / "docs/table3/multi30k_en_de_cpu-3000/table3.md"
    written = table_cells(measured, "# Table 3, measured")
    quoted = table_cells(ROOT / "docs/table3.md", "## The table, measured")
    assert list(quoted) == list(written)
    columns = ("seeds", "params", "PPL (dev)", "BLEU (dev)", "BLEU (test)")
    assert {row: [quoted[row][c] for c in columns] for row in quoted} == {
        row: [written[row][c] for c in columns] for row in written
    }
