"""`model_cards/`: the card of every shipped model, equal to its folder's README.md, and an index whose figures are
the models' own `results.json`."""

from pathlib import Path

from helpers import figure_cells, shipped_results

from vanilla_transformer.translation.shipped import PRETRAINED_DIR, shipped_models


CARDS = Path(__file__).resolve().parents[1] / "model_cards"


def expected_row(name: str) -> str:
    """The index's row for the shipped model `name`, from its results.json."""
    results = shipped_results(name)
    decoding = results["decoding"]
    return (
        f"| [`{name}`](../vanilla_transformer/pretrained/{name}) | {results['src_lang']} -> {results['tgt_lang']} "
        f"| beam {decoding['num_beams']}, length penalty {decoding['length_penalty']} "
        f"{figure_cells(results)}| [{name}.md]({name}.md) |"
    )


def test_model_cards_hold_one_card_per_shipped_model_and_the_index():
    assert shipped_models(), "the package ships no model"
    assert sorted(path.name for path in CARDS.iterdir()) == sorted(
        ["README.md", *(f"{n}.md" for n in shipped_models())]
    )


def test_each_card_is_its_models_readme():
    for name in shipped_models():
        card = (PRETRAINED_DIR / name / "README.md").read_bytes()
        assert (CARDS / f"{name}.md").read_bytes() == card, (
            f"model_cards/{name}.md differs from the model's card: "
            f"cp vanilla_transformer/pretrained/{name}/README.md model_cards/{name}.md"
        )


def test_the_index_table_is_the_models_results():
    lines = (CARDS / "README.md").read_text().splitlines()
    start = lines.index("<!-- shipped-models-table -->") + 3  # the marker, the header, the rule
    rows = [line for line in lines[start:] if line.startswith("| ")]
    assert rows == [expected_row(name) for name in shipped_models()]
