"""The model card generator: metadata that huggingface_hub parses back, and content that follows the run."""

import copy
import json
import os
import re
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.hub.model_card import (
    local_dataset_name,
    paper_deviations,
    render_model_card,
    write_model_card,
)


SIGNATURE = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
RESULTS = {
    "src_lang": "en",
    "tgt_lang": "de",
    "dataset": {"name": "Multi30k", "hub_id": "bentrevett/multi30k", "train_pairs": 29000},
    "bleu": {
        "test": {"score": 35.2137, "signature": SIGNATURE, "split": "test_2016_flickr"},
        "validation": {"score": 36.9, "signature": SIGNATURE, "split": "val"},
    },
    "training": {
        "steps": 1200,
        "epochs": 3.5,
        "train_runtime_s": 3725.4,
        "tokens_per_second": 5234.2,
        "hardware": "2-core CPU (no GPU)",
        "hyperparameters": {"learning_rate": 0.0007, "warmup_steps": 4000, "label_smoothing_factor": 0.1},
    },
    "checkpoint_averaging": {"num_checkpoints": 5, "checkpoints": ["checkpoint-1000", "checkpoint-1200"]},
    "decoding": {"num_beams": 4, "length_penalty": 0.6},
    "tokenizer": {"type": "BPE", "vocab_size": 100},
    "num_parameters": 123456,
}
REPO = "tester/vt-small-en-de"


def small_config(**overrides):
    """The "small" preset (the card shows its sizes against the paper's base model), on a 100-token vocabulary."""
    return VanillaTransformerConfig.from_preset("small", vocab_size=100, **overrides)


def front_matter(text: str) -> dict:
    # Parsed with PyYAML directly, independently of huggingface_hub's card parser.
    match = re.match(r"---\n(.*?)\n---\n", text, re.S)
    assert match, "the card must start with a YAML front matter block"
    return yaml.safe_load(match.group(1))


def section(text: str, start: str, end: str) -> str:
    return text[text.index(start) : text.index(end)]


def test_metadata_parses_back_and_model_index_equals_results(tmp_path):
    path = write_model_card(tmp_path / "ckpt", small_config(), RESULTS, repo_id=REPO)
    assert path == str(tmp_path / "ckpt" / "README.md")

    card = ModelCard.load(path)  # strict: invalid model-index metadata raises here
    data = card.data
    assert data.language == ["en", "de"]
    assert data.license == "apache-2.0"
    assert data.library_name == "transformers"
    assert data.pipeline_tag == "translation"
    assert data.datasets == ["bentrevett/multi30k"]
    assert data.metrics == ["bleu"]
    assert "translation" in data.tags and "vanilla-transformer" in data.tags
    assert data.model_name == "vt-small-en-de"
    scores = {r.dataset_split: r.metric_value for r in data.eval_results}
    assert scores == {entry["split"]: entry["score"] for entry in RESULTS["bleu"].values()}
    assert {r.metric_args["signature"] for r in data.eval_results} == {SIGNATURE}
    assert {(r.task_type, r.metric_type, r.dataset_type) for r in data.eval_results} == {
        ("translation", "bleu", "bentrevett/multi30k")
    }

    raw = front_matter(Path(path).read_text(encoding="utf-8"))
    (index,) = raw["model-index"]
    raw_scores = {
        r["dataset"]["split"]: (r["metrics"][0]["value"], r["metrics"][0]["args"]["signature"])
        for r in index["results"]
    }
    assert raw_scores == {"test_2016_flickr": (35.2137, SIGNATURE), "val": (36.9, SIGNATURE)}


def test_results_json_file_gives_the_same_card(tmp_path):
    results_path = tmp_path / "results.json"
    results_path.write_text(json.dumps(RESULTS))
    from_dict = render_model_card(small_config(), RESULTS, REPO).content
    from_file = render_model_card(small_config(), str(results_path), REPO).content
    assert from_file == from_dict


def test_deviations_from_the_paper_are_listed():
    config = small_config(normalize_before=True, position_embedding_type="learned", attention_dropout=0.1)
    expected = {"normalize_before", "position_embedding_type", "attention_dropout"}
    assert {d["name"] for d in paper_deviations(config)} == expected

    text = render_model_card(config, RESULTS, REPO).content
    listed = set(re.findall(r"^- `(\w+)=", section(text, "**Differences", "## How to use"), re.M))
    assert listed == expected
    assert "`position_embedding_type=learned` instead of the paper's `sinusoidal`" in text

    paper = render_model_card(small_config(), RESULTS, REPO).content
    differences = section(paper, "**Differences", "## How to use")
    assert (
        not re.search(r"^- `", differences, re.M) and "every architectural flag has the paper's value" in differences
    )


def model_table(text: str) -> dict[str, tuple[str, str]]:
    """The card's one table of this model beside the paper's base model: row name -> (this model, paper)."""
    table = section(text, "| | this model | paper (base) |", "**Differences")
    rows = [line.split(" | ") for line in table.strip().splitlines()[2:]]
    return {cells[0].lstrip("| "): (cells[1], cells[2].rstrip(" |")) for cells in rows}


def test_preset_and_sizes():
    small = render_model_card(small_config(), RESULTS, REPO).content
    assert "the **small** preset" in small
    # One table, this model beside the paper's base (Table 3); the values that differ are in bold.
    assert small.count("| d_model |") == 1 and "| setting | value |" not in small
    assert model_table(small) == {
        "d_model": ("**256**", "512"),
        "layers, N (encoder / decoder)": ("**3 / 3**", "6 / 6"),
        "attention heads, h (encoder / decoder)": ("**4 / 4**", "8 / 8"),
        "feed-forward size, d_ff (encoder / decoder)": ("**1024 / 1024**", "2048 / 2048"),
        "dropout, P_drop": ("0.1", "0.1"),
        "shared vocabulary": ("100, BPE", "about 37,000, BPE (shared source/target)"),
        "positional encoding": ("sinusoidal", "sinusoidal"),
        "parameters": ("123,456", "65M"),
    }
    base = render_model_card(VanillaTransformerConfig.from_preset("base", vocab_size=100), RESULTS, REPO).content
    assert "the paper's **base** model (Table 3)" in base
    assert not any("**" in value for value, _ in model_table(base).values())
    custom = render_model_card(small_config(d_model=128, position_embedding_type="learned"), RESULTS, REPO).content
    assert "a custom configuration" in custom
    assert model_table(custom)["positional encoding"] == ("**learned**", "sinusoidal")


def test_attention_figure_section():
    figure = {
        "file": "attention.png",
        "layer": 1,
        "layers": 3,
        "num_beams": 4,
        "source": "A man sleeps.",
        "split": "val",
        "translation": "Ein Mann schläft.",
    }
    text = render_model_card(small_config(), {**RESULTS, "attention_figure": figure}, REPO).content
    assert "![Cross-attention of decoder layer 1](attention.png)" in text
    assert 'the sentence "A man sleeps." (from the val split)' in text and '"Ein Mann schläft." (beam 4)' in text
    assert "## What the model attends to" not in render_model_card(small_config(), RESULTS, REPO).content


def test_usage_training_and_results_sections():
    text = render_model_card(small_config(), RESULTS, REPO).content
    assert f'pipeline("translation", model="{REPO}", trust_remote_code=True)' in text
    assert f'AutoModelForSeq2SeqLM.from_pretrained("{REPO}", trust_remote_code=True)' in text
    assert f'AutoTokenizer.from_pretrained("{REPO}", trust_remote_code=True)' in text
    assert "An English → German translation model" in text
    assert "29,000 training sentence pairs" in text
    # The training table in words (issue 36: raw keys such as `lr_cooldown_updates [4730, 5883]` read badly).
    assert "| learning rate | 0.0007 |" in text and "| warm-up updates (paper: 4,000) | 4000 |" in text
    assert "**Hardware:** 2-core CPU (no GPU)" in text
    assert "**Training time:** 1:02:05" in text  # 3725.4 s
    assert "average of the last 5 checkpoints" in text
    assert "| parameters | 123,456 |" in text
    # One table row per split; the signature's "|" are escaped so the row keeps exactly three cells.
    rows = [line for line in text.splitlines() if line.startswith("| test_2016_flickr ")]
    assert len(rows) == 1
    cells = re.split(r"(?<!\\)\|", rows[0])[1:-1]
    assert [c.strip() for c in cells] == ["test_2016_flickr", "35.21", f"`{SIGNATURE.replace('|', chr(92) + '|')}`"]


def test_the_card_gives_the_training_time_and_the_runs_apart():
    timed = copy.deepcopy(RESULTS)
    timed["training"]["wall_time_s"] = 3790.2
    text = render_model_card(small_config(), timed, REPO).content
    assert "**Training time:** 1:02:05 (h:mm:ss); the whole run, with its last validation, test translation and " \
        "averaging: 1:03:10" in text  # fmt: skip
    assert "the whole run" not in render_model_card(small_config(), RESULTS, REPO).content  # not recorded: not said


def test_one_checkpoint_is_said_in_the_singular():
    one = copy.deepcopy(RESULTS)
    one["checkpoint_averaging"] = {"num_checkpoints": 1, "checkpoints": ["checkpoint-1200"]}
    text = render_model_card(small_config(), one, REPO).content
    assert "(average of 1 checkpoint)" in text.splitlines()[text.splitlines().index("---", 1) + 2]  # the title
    assert "average of the last 1 checkpoint (checkpoint-1200)" in text and "1 checkpoints" not in text


def test_ctranslate2_section_states_the_models_own_decoding():
    text = render_model_card(small_config(), RESULTS, REPO).content
    assert "decoding settings\nof its generation config (beam 4, length penalty 0.6," in text
    chosen = {**RESULTS, "decoding": {"num_beams": 4, "length_penalty": 1.0}}
    assert "(beam 4, length penalty 1.0," in render_model_card(small_config(), chosen, REPO).content


def test_lowercased_bleu_row_and_validation_curve():
    lower = {"score": 37.04, "signature": SIGNATURE.replace("case:mixed", "case:lc")}
    results = {**RESULTS, "bleu": {"test": {**RESULTS["bleu"]["test"], "lowercase": lower}}, "plots": ["bleu.png"]}
    card = render_model_card(small_config(), results, REPO)
    rows = [line for line in card.content.splitlines() if line.startswith("| test_2016_flickr")]
    assert [re.split(r"(?<!\\)\|", row)[1:3] for row in rows] == [
        [" test_2016_flickr ", " 35.21 "],
        [" test_2016_flickr, lowercased ", " 37.04 "],
    ]
    assert "case:lc" in rows[1]
    # The model-index keeps one entry per split: the cased score.
    assert [r.metric_value for r in card.data.eval_results] == [RESULTS["bleu"]["test"]["score"]]
    assert "![Validation BLEU during training](bleu.png)" in card.content
    assert "bleu.png" not in render_model_card(small_config(), RESULTS, REPO).content


def test_minimal_results_and_no_repo_id(tmp_path):
    results = {"src_lang": "de", "tgt_lang": "en", "bleu": {"test": {"score": 12.5, "signature": SIGNATURE}}}
    card = ModelCard.load(write_model_card(tmp_path, small_config(), results))
    assert card.data.model_name == "vanilla-transformer-de-en"
    assert card.data.datasets is None
    assert [(r.dataset_split, r.metric_value) for r in card.data.eval_results] == [("test", 12.5)]
    assert 'model="path/to/this/checkpoint"' in card.content
    assert "none (the paper averages the last 5 checkpoints" in card.content


def _broken(**changes):
    results = copy.deepcopy(RESULTS)
    for dotted, value in changes.items():
        *parents, key = dotted.split(".")
        target = results
        for parent in parents:
            target = target[parent]
        if value is KeyError:
            del target[key]
        else:
            target[key] = value
    return results


@pytest.mark.parametrize(
    "results, named",
    [
        (_broken(src_lang=KeyError), "src_lang"),
        (_broken(tgt_lang="German"), "tgt_lang"),
        (_broken(bleu=[]), "bleu"),
        (_broken(**{"bleu.test.score": "35"}), "score"),
        (_broken(**{"bleu.test.score": 135.0}), "score"),
        (_broken(**{"bleu.test.signature": KeyError}), "signature"),
        (_broken(**{"bleu.test.lowercase": 37.0}), "lowercase"),
        (_broken(training=[1, 2]), "training"),
        (_broken(attention_figure="attention.png"), "attention_figure"),
        (["not", "a", "dict"], "results"),
    ],
)
def test_bad_results_raise_value_errors_naming_the_key(results, named):
    with pytest.raises(ValueError, match=named):
        render_model_card(small_config(), results, REPO)


def test_bad_arguments_raise_value_errors(tmp_path):
    with pytest.raises(ValueError, match="results"):
        render_model_card(small_config(), str(tmp_path / "missing.json"), REPO)
    with pytest.raises(ValueError, match="repo_id"):
        render_model_card(small_config(), RESULTS, "no-namespace")
    with pytest.raises(ValueError, match="template_path"):
        render_model_card(small_config(), RESULTS, REPO, template_path=tmp_path / "nope.md")


def test_a_local_dataset_is_named_by_its_folder_or_as_multi30k_in_a_clone(tmp_path):
    """The Multi30k recipes read Multi30k from a clone of its repository (README): the card names it Multi30k,
    whatever the clone is called; other folders by their own name."""
    for clone in ("multi30k", "dataset"):
        assert local_dataset_name(tmp_path / clone / "data" / "task1" / "raw") == "multi30k"
    assert local_dataset_name(tmp_path / "shared" / "data" / "multi30k") == "multi30k"
    assert local_dataset_name(tmp_path / "my_corpus") == "my_corpus"
    assert local_dataset_name(tmp_path / "raw") == "raw"


def test_final_and_averaged_cards_are_two_models_with_readable_training_tables():
    hyperparameters = {"lr_cooldown_updates": [4730, 5883], "adam_betas": [0.9, 0.98], "bidirectional_steps": None}
    # A timed run plans its cool-down to end at update 5,883; the time limit stopped it at 5,860.
    results = {**RESULTS, "training": {**RESULTS["training"], "steps": 5860, "hyperparameters": hyperparameters}}
    results["dataset"] = {"name": "multi30k", "path": "multi30k/data/task1/raw", "train_pairs": 29000}
    final = render_model_card(small_config(), {**results, "checkpoint_averaging": None})
    averaged = render_model_card(small_config(), results)  # RESULTS averages 5 checkpoints
    assert final.data.model_name == "vanilla-transformer-en-de"
    assert averaged.data.model_name == "vanilla-transformer-en-de-averaged"
    titles = [next(line for line in card.content.splitlines() if line.startswith("# ")) for card in (final, averaged)]
    assert titles == ["# vanilla-transformer-en-de", "# vanilla-transformer-en-de-averaged (average of 5 checkpoints)"]
    text = averaged.content
    assert (
        "| cool-down updates | 4,730 to 5,883 (planned; the time limit stopped the run at update 5,860) |" in text
        and "| Adam betas (paper: 0.9, 0.98) | 0.9, 0.98 |" in text
    )
    assert "bidirectional" not in text  # not used by the run: no row
    ended = {**results, "training": {**results["training"], "steps": 5883}}
    assert "| cool-down updates | 4,730 to 5,883 |" in render_model_card(small_config(), ended).content
    assert "[Multi30k](https://github.com/multi30k/dataset), English → German: 29,000 training sentence pairs." in text
    assert "[modeling_vanilla_transformer.py](modeling_vanilla_transformer.py)" in text


SHIPPED_CARDS = sorted(
    (Path(__file__).resolve().parents[1] / "vanilla_transformer" / "pretrained").glob("*/results.json")
)


@pytest.mark.parametrize("results_path", SHIPPED_CARDS, ids=lambda p: p.parent.name)
def test_the_shipped_cards_are_what_the_template_writes_from_their_results(results_path):
    """Each shipped model's card (vanilla_transformer/pretrained/NAME/README.md) is today's template rendered from
    its results.json (BLEU of the shipped weights on validation and test: scripts/ship_model.py), with the model's own
    config. `VANILLA_TRANSFORMER_UPDATE_CARDS=1` rewrites them after a template change."""
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    results = json.loads(results_path.read_text())
    config = VanillaTransformerConfig.from_pretrained(results_path.parent)
    with torch.device("meta"):
        assert VanillaTransformerForConditionalGeneration(config).num_parameters() == results["num_parameters"]
    card = results_path.parent / "README.md"
    options = dict(model_name=f"vanilla-transformer-{results['name']}", shipped_name=results["name"])
    if os.environ.get("VANILLA_TRANSFORMER_UPDATE_CARDS"):
        write_model_card(results_path.parent, config, results, **options)
    assert ModelCard.load(card).content == render_model_card(config, results, **options).content


def test_the_card_says_the_runs_topology():
    """Machines, processes on each, accumulation and tokens per update (results.json's training.topology); a card
    from results without it (the shipped ones) has no such line."""
    results = copy.deepcopy(RESULTS)
    results["training"]["topology"] = {
        "machines": 2,
        "processes_per_machine": 8,
        "world_size": 16,
        "gradient_accumulation_steps": 1,
        "max_tokens_per_update": 50000,
    }
    text = render_model_card(small_config(), results, REPO).content
    assert "**Topology:** 2 machines x 8 processes, gradient accumulation 1: up to 50,000 tokens per side" in text
    results["training"]["topology"].update(machines=1, processes_per_machine=1, gradient_accumulation_steps=8)
    assert (
        "**Topology:** 1 machine x 1 process, gradient accumulation 8:"
        in render_model_card(small_config(), results, REPO).content
    )
    assert "Topology" not in render_model_card(small_config(), RESULTS, REPO).content
