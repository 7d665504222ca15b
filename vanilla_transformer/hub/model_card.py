"""Writes the Hub model card (README.md) of a trained model from its config and its run's results.

The card is `model_card_template.md` (package data, beside this module), a Jinja2 template rendered by
`huggingface_hub.ModelCard.from_template`, so the YAML metadata (languages, license, `library_name`, `pipeline_tag`, tags, datasets, metrics and the
`model-index` with the BLEU scores) is produced by huggingface_hub's own `ModelCardData` / `EvalResult` and
parses back with `ModelCard.load`. What this module adds is the content: which paper choices the config keeps
or changes, the run's data, hyper-parameters, hardware and scores.

The results JSON (written by `vanilla-transformer train`, training/report.py; read here) is a dict:

    {
      "src_lang": "en",                        # required, ISO 639 code of the source language
      "tgt_lang": "de",                        # required, of the target language
      "dataset": {                             # optional; a plain string is taken as the name
        "name": "Multi30k",                    #   shown in the card
        "hub_id": "bentrevett/multi30k",       #   optional Hub dataset id: goes into `datasets:` metadata
        "train_pairs": 29000,                  #   optional, number of training sentence pairs
        "description": "..."                   #   optional free text (preprocessing, filtering, ...)
      },
      "bleu": {                                # required, one entry per evaluated split ({}: none was scored)
        "test": {
          "score": 35.2,                       #   corpus BLEU in [0, 100], as sacreBLEU reports it
          "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0",
          "split": "test_2016_flickr",         #   optional, the dataset split name (default: the key)
          "lowercase": {"score": 37.0, "signature": "nrefs:1|case:lc|..."}  # optional, lowercased BLEU
        }
      },
      "training": {                            # optional
        "steps": 10000, "epochs": 20.5,        #   optimizer updates, passes over the data
        "train_runtime_s": 3600.0,             #   wall-clock seconds of training (a resumed run's: before its checkpoint too)
        "wall_time_s": 3790.0,                 #   optional, the whole run's: training, validation, test, averaging
        "resumed": {"from_update": 6000, "seconds_before": 1800.0},   # optional: the checkpoint a run resumed from
        "tokens_per_second": 5200.0,           #   target tokens per second (or whatever the run measures)
        "hardware": "2-core CPU",              #   free text
        "hyperparameters": {"learning_rate": 7e-4, "warmup_steps": 4000, ...}   # free key -> value
      },
      "plots": ["loss.png", "bleu.png"],      # optional; "bleu.png" (validation BLEU curve) goes into the card
      "warnings": ["Not a usable model: ..."], # optional; the card opens with them (training/report.py)
      "learning": {"could_have_learned": true, "line": "Could have learned: ..."},  # optional; shown without BLEU
      "checkpoint_averaging": {"num_checkpoints": 5, "checkpoints": ["checkpoint-9600", ...]},  # or null
      "decoding": {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": "source length + 50"},  # optional
      "tokenizer": {"type": "BPE", "vocab_size": 8000},   # optional
      "num_parameters": 9500000,               # optional, model.num_parameters()
      "preset": "small",                       # optional; detected from the config when absent
      "attention_figure": {                    # optional, written by `write_attention_figure`
        "file": "attention.png", "layer": 1, "layers": 3, "num_beams": 4,
        "source": "A man ...", "split": "val", "translation": "Ein Mann ..."
      }
    }
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import re
from pathlib import Path

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from ..configuration_vanilla_transformer import PRESETS


logger = logging.getLogger(__name__)

# Package data (pyproject `package-data`), so that a wheel install can write cards too.
DEFAULT_TEMPLATE = Path(__file__).resolve().parent / "model_card_template.md"

# The paper's choice for each flag that allows a later variant, and what the flag changes (PAPER_SPEC.md).
PAPER_DEFAULTS = {
    "normalize_before": (False, "post-norm `LayerNorm(x + Dropout(Sublayer(x)))`, section 3.1"),
    "position_embedding_type": ("sinusoidal", "fixed sinusoidal positional encodings, section 3.5"),
    "attention_bias": (False, "no biases in W_Q, W_K, W_V, W_O, as in tensor2tensor, the authors' code"),
    "scale_embedding": (True, "embeddings multiplied by sqrt(d_model), section 3.4"),
    "tie_word_embeddings": (True, "one matrix for both embeddings and the pre-softmax projection, section 3.4"),
    "activation_function": ("relu", "FFN(x) = max(0, x W1 + b1) W2 + b2, section 3.3"),
    "attention_dropout": (0.0, "no dropout on attention weights in the paper's text"),
    "activation_dropout": (0.0, "no dropout inside the feed-forward network in the paper's text"),
}
# The paper's base model (Table 3; vocabulary: section 5.1), shown beside this model's settings.
PAPER_BASE = {
    "vocabulary": "about 37,000, BPE (shared source/target)",
    "position_embedding_type": "sinusoidal",
    "num_parameters": "65M",
}
ATTENTION_FIGURE = "attention.png"  # the card's figure, in the model directory (hub.files_to_push sends *.png)
LANGUAGE_NAMES = {"en": "English", "de": "German", "fr": "French", "cs": "Czech", "es": "Spanish", "ro": "Romanian"}
EXAMPLES = {
    "en": "A man is riding a bicycle down the street.",
    "de": "Ein Mann fährt mit dem Fahrrad die Straße entlang.",
    "fr": "Un homme descend la rue à vélo.",
}
PAPER_URL = "https://arxiv.org/abs/1706.03762"
# Datasets named by a local folder: their proper name and where to get them.
KNOWN_DATASETS = {"multi30k": ("Multi30k", "https://github.com/multi30k/dataset")}
# Local folders known by where they sit, whatever their clone is called: the multi30k/dataset repository's text files.
KNOWN_LAYOUTS = {("data", "task1", "raw"): "multi30k"}
# The training table's rows: results.json's hyperparameter keys, in words.
HYPERPARAMETER_LABELS = {
    "max_tokens": "tokens per batch and process",
    "gradient_accumulation_steps": "gradient accumulation steps",
    "lr_schedule": "learning-rate schedule",
    "warmup_steps": "warm-up updates (paper: 4,000)",
    "lr_factor": "learning-rate factor (paper: 1)",
    "learning_rate": "learning rate",
    "lr_cooldown": "learning-rate cool-down, fraction of the run",
    "lr_cooldown_updates": "cool-down updates",
    "label_smoothing_factor": "label smoothing (paper: 0.1)",
    "dropout": "dropout (paper: 0.1)",
    "subword_split": "subword splitting probability",
    "bidirectional_steps": "bidirectional updates",
    "adam_betas": "Adam betas (paper: 0.9, 0.98)",
    "adam_epsilon": "Adam epsilon (paper: 1e-9)",
    "seed": "seed",
}
TAGS = ["translation", "vanilla-transformer", "attention-is-all-you-need", "seq2seq"]  # of every card
CITATION = """@inproceedings{vaswani2017attention,
  title     = {Attention Is All You Need},
  author    = {Vaswani, Ashish and Shazeer, Noam and Parmar, Niki and Uszkoreit, Jakob and Jones, Llion and
               Gomez, Aidan N. and Kaiser, {\\L}ukasz and Polosukhin, Illia},
  booktitle = {Advances in Neural Information Processing Systems},
  volume    = {30},
  year      = {2017}
}"""


def paper_deviations(config) -> list[dict]:
    """The config flags whose value differs from the paper's choice: [{name, value, paper, meaning}]."""
    deviations = []
    for name, (paper, meaning) in PAPER_DEFAULTS.items():
        if not hasattr(config, name):
            raise ValueError(
                f"`config` has no attribute {name!r}: pass a VanillaTransformerConfig (got {type(config).__name__})."
            )
        value = getattr(config, name)
        if value != paper:
            deviations.append({"name": name, "value": value, "paper": paper, "meaning": meaning})
    return deviations


def detect_preset(config) -> str | None:
    """The name of the preset whose sizes the config has ("base", "big", "small"), None for a custom one."""
    for name, values in PRESETS.items():
        if all(getattr(config, key, None) == value for key, value in values.items()):
            return name
    return None


def compare_with_paper(config, tokenizer: dict | None = None, num_parameters: int | None = None) -> list[dict]:
    """This model's sizes and settings beside the paper's base model: [{name, value, paper, differs}]; `differs`
    marks an architecture value other than the paper's (vocabulary and parameter count follow from the data)."""
    base = PRESETS["base"]

    def pairs(key):
        return getattr(config, f"encoder_{key}"), getattr(config, f"decoder_{key}")

    rows = [
        ("d_model", config.d_model, base["d_model"]),
        ("layers, N (encoder / decoder)", pairs("layers"), (base["encoder_layers"], base["decoder_layers"])),
        (
            "attention heads, h (encoder / decoder)",
            pairs("attention_heads"),
            (base["encoder_attention_heads"], base["decoder_attention_heads"]),
        ),
        (
            "feed-forward size, d_ff (encoder / decoder)",
            pairs("ffn_dim"),
            (base["encoder_ffn_dim"], base["decoder_ffn_dim"]),
        ),
        ("dropout, P_drop", config.dropout, base["dropout"]),
        ("positional encoding", config.position_embedding_type, PAPER_BASE["position_embedding_type"]),
    ]
    table = [
        {
            "name": name,
            "value": " / ".join(map(str, value)) if isinstance(value, tuple) else value,
            "paper": " / ".join(map(str, paper)) if isinstance(paper, tuple) else paper,
            "differs": value != paper,
        }
        for name, value, paper in rows
    ]
    tokenizer = tokenizer or {}
    vocabulary = f"{config.vocab_size:,}" + (f", {tokenizer['type']}" if tokenizer.get("type") else "")
    table.insert(
        -1, {"name": "shared vocabulary", "value": vocabulary, "paper": PAPER_BASE["vocabulary"], "differs": False}
    )
    if num_parameters:
        table.append(
            {
                "name": "parameters",
                "value": f"{num_parameters:,}",
                "paper": PAPER_BASE["num_parameters"],
                "differs": False,
            }
        )
    return table


def load_results(results) -> dict:
    """`results` as a validated dict; a str/PathLike is read as the results JSON file."""
    if isinstance(results, (str, os.PathLike)):
        path = Path(results)
        if not path.is_file():
            raise ValueError(f"`results` file {str(path)!r} does not exist: pass the run's results JSON or a dict.")
        results = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(results, dict):
        raise ValueError(f"`results` must be a dict (or a path to its JSON), got {type(results).__name__}.")
    for key in ("src_lang", "tgt_lang"):
        value = results.get(key)
        if not isinstance(value, str) or not re.fullmatch(r"[a-z]{2,3}", value):
            raise ValueError(f"`results[{key!r}]` must be an ISO 639 language code such as 'en', got {value!r}.")
    bleu = results.get("bleu")
    if not isinstance(bleu, dict):
        raise ValueError(
            f"`results['bleu']` must be a dict split -> {{score, signature}} ({{}} when no split was scored), "
            f"got {bleu!r}."
        )
    for split, entry in bleu.items():
        score = entry.get("score") if isinstance(entry, dict) else None
        if isinstance(score, bool) or not isinstance(score, (int, float)) or not 0 <= score <= 100:
            raise ValueError(f"`results['bleu'][{split!r}]['score']` must be a number in [0, 100], got {score!r}.")
        if not isinstance(entry.get("signature"), str) or not entry["signature"]:
            raise ValueError(
                f"`results['bleu'][{split!r}]['signature']` must be the sacreBLEU signature string "
                f"(str(BLEU().get_signature())), got {entry.get('signature')!r}."
            )
        lower = entry.get("lowercase")
        if lower is not None and not (isinstance(lower, dict) and isinstance(lower.get("signature"), str)):
            raise ValueError(
                f"`results['bleu'][{split!r}]['lowercase']` must be {{score, signature}} of the lowercased "
                f"BLEU (sacreBLEU `lowercase=True`), got {lower!r}."
            )
    for key in ("training", "checkpoint_averaging", "decoding", "tokenizer", "attention_figure"):
        if results.get(key) is not None and not isinstance(results[key], dict):
            raise ValueError(f"`results[{key!r}]` must be a dict or absent, got {type(results[key]).__name__}.")
    return results


def local_dataset_name(path) -> str:
    """The name of a dataset read from the local `path`, for results.json and the card: Multi30k for the files of a
    clone of its repository (`KNOWN_LAYOUTS`), else the folder's (or file's) own name."""
    resolved = Path(path).resolve()
    for tail, name in KNOWN_LAYOUTS.items():
        if resolved.parts[-len(tail) :] == tail:
            return name
    return resolved.name


def _dataset(results: dict) -> dict:
    dataset = results.get("dataset") or {}
    if isinstance(dataset, str):
        dataset = {"name": dataset}
    if not isinstance(dataset, dict):
        raise ValueError(f"`results['dataset']` must be a dict or a name, got {type(dataset).__name__}.")
    name = dataset.get("name") or dataset.get("hub_id") or "unknown"
    proper, url = KNOWN_DATASETS.get(name.lower(), (name, None))
    return {**dataset, "name": proper, "url": dataset.get("url") or url}


def _hyperparameter_rows(hyperparameters: dict, steps: int | None = None) -> list[tuple[str, str]]:
    """(label, value) rows of the training table: known keys in words, lists and large numbers made readable, what
    the run did not use (None) left out. `steps`: the updates the run made (a timed run plans its cool-down to end
    at an update the time limit may stop it just short of)."""
    rows = []
    for key, value in hyperparameters.items():
        if value is None:
            continue
        if key == "lr_cooldown_updates" and isinstance(value, list | tuple) and None not in value:
            text = f"{value[0]:,} to {value[1]:,}"
            if steps is not None and steps < value[1]:
                text += f" (planned; the time limit stopped the run at update {steps:,})"
        elif isinstance(value, list | tuple):
            text = ", ".join(str(v) for v in value)
        elif isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
            text = f"{value:,}"
        else:
            text = str(value)
        rows.append((HYPERPARAMETER_LABELS.get(key, key), text))
    return rows


def _duration(seconds) -> str | None:
    return None if seconds is None else str(datetime.timedelta(seconds=round(float(seconds))))


def _eval_results(results: dict, dataset: dict) -> list[EvalResult]:
    # One model-index entry per split; the sacreBLEU signature travels with the score (metric args).
    pair = f"{results['src_lang']}-{results['tgt_lang']}"
    return [
        EvalResult(
            task_type="translation",
            task_name=f"Translation {pair}",
            dataset_type=dataset.get("hub_id") or dataset["name"].lower(),
            dataset_name=dataset["name"],
            dataset_config=pair,
            dataset_split=entry.get("split") or split,
            metric_type="bleu",
            metric_name="BLEU (sacreBLEU)",
            metric_value=entry["score"],
            metric_args={"signature": entry["signature"]},
        )
        for split, entry in results["bleu"].items()
    ]


def render_model_card(
    config,
    results,
    repo_id: str | None = None,
    *,
    model_name: str | None = None,
    license: str = "apache-2.0",
    tags=(),
    template_path=None,
    shipped_name: str | None = None,
) -> ModelCard:
    """The model card as a `huggingface_hub.ModelCard` (see the module docstring for `results`); `shipped_name`: the
    short name of a model that ships inside the package (`vanilla_transformer/translation/shipped.py`), said in the card."""
    results = load_results(results)
    template_path = _template(template_path, repo_id)
    src, tgt = results["src_lang"], results["tgt_lang"]
    dataset = _dataset(results)
    averaging = results.get("checkpoint_averaging")
    averaged = bool((averaging or {}).get("num_checkpoints"))
    # The final and the averaged model of a run are two models: their names differ.
    default_name = f"vanilla-transformer-{src}-{tgt}" + ("-averaged" if averaged else "")
    model_name = model_name or (repo_id.split("/")[-1] if repo_id else default_name)
    preset = results.get("preset") or detect_preset(config)
    card_data = ModelCardData(
        language=[src, tgt],
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=[*TAGS, *tags],
        datasets=[dataset["hub_id"]] if dataset.get("hub_id") else None,
        metrics=["bleu"] if results["bleu"] else None,
        model_name=model_name,
        eval_results=_eval_results(results, dataset) or None,
    )
    training = results.get("training") or {}
    src_name = LANGUAGE_NAMES.get(src, src)
    context = dict(
        model_name=model_name,
        repo_ref=repo_id or "path/to/this/checkpoint",
        src=src,
        tgt=tgt,
        src_name=src_name,
        tgt_name=LANGUAGE_NAMES.get(tgt, tgt),
        article="An" if src_name[0] in "AEIOU" else "A",
        example=EXAMPLES.get(src, EXAMPLES["en"]),
        paper_url=PAPER_URL,
        citation=CITATION,
        preset=preset,
        config=config,
        deviations=paper_deviations(config),
        dataset=dataset,
        comparison=compare_with_paper(config, results.get("tokenizer"), results.get("num_parameters")),
        bleu=_bleu_rows(results),
        # The validation BLEU curve that training plots (bleu.png), pushed beside the card.
        bleu_curve="bleu.png" if "bleu.png" in (results.get("plots") or ()) else None,
        training=training,
        hyperparameters=_hyperparameter_rows(training.get("hyperparameters") or {}, training.get("steps")),
        runtime=_duration(training.get("train_runtime_s")),
        wall_time=_duration(training.get("wall_time_s")),
        averaging=averaging,
        decoding=results.get("decoding") or {},
        tokenizer=results.get("tokenizer") or {},
        figure=results.get("attention_figure"),
        not_usable=results.get("warnings"),  # why the run's model cannot translate (training/report.py)
        learning=results.get("learning") or {},  # whether it could have learned, said where no BLEU was measured
        shipped_name=shipped_name,
        shipping=results.get("shipping") or {},
    )
    return ModelCard.from_template(card_data, template_path=str(template_path), **context)


def _template(template_path, repo_id: str | None) -> Path:
    """The card template's path (the package's own when None), once it and `repo_id` are checked."""
    template_path = Path(template_path) if template_path is not None else DEFAULT_TEMPLATE
    if not template_path.is_file():
        raise ValueError(
            f"`template_path` {str(template_path)!r} does not exist: pass the path of a Jinja2 card "
            "template, or leave it unset for the package's own (model_card_template.md)."
        )
    if repo_id is not None and not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id):
        raise ValueError(f"`repo_id` must look like 'namespace/name', got {repo_id!r}.")
    return template_path


def _bleu_rows(results: dict) -> list[dict]:
    """The card's BLEU table: one row per split, and one per lowercased score."""
    # "|" separates Markdown table cells, even inside a code span: the signature's bars are escaped.
    return [
        {
            "split": (entry.get("split") or key) + label,
            "score": scored["score"],
            "signature_md": scored["signature"].replace("|", "\\|"),
        }
        for key, entry in results["bleu"].items()
        for label, scored in (("", entry), (", lowercased", entry.get("lowercase")))
        if scored
    ]


def write_attention_figure(model, tokenizer, sentence: str, output_dir, split: str | None = None) -> dict | None:
    """Draw the cross-attention of `model` for `sentence` and its translation (beam search with its generation config,
    as its test BLEU was scored) into
    `output_dir/attention.png`, and return the results entry (`attention_figure`) that puts it into the card;
    `split` names the data split the sentence comes from, for the caption.

    The layer drawn (all heads and their mean) is the one whose head-averaged cross-attention is the most
    concentrated (largest mean, over target tokens, of the biggest weight in the row): the clearest alignment.
    Returns None, with a warning, when the figure cannot be drawn (matplotlib missing, a sentence the model does
    not take): a finished training run is not failed for its card's figure.
    """
    from ..evaluation.attention import DPI, attention_weights, draw_attention, require_matplotlib

    try:
        require_matplotlib()
        weights = attention_weights(model, tokenizer, sentence)
    except (ImportError, ValueError) as error:
        logger.warning("No attention figure in the model card: %s", error)
        return None
    layer = int(weights.cross.mean(dim=1).amax(dim=-1).mean(dim=-1).argmax())
    path = Path(output_dir) / ATTENTION_FIGURE
    draw_attention(weights, "cross", layer).savefig(path, dpi=DPI)
    logger.info("attention figure (cross-attention, layer %d) written to %s", layer, path)
    return {
        "file": ATTENTION_FIGURE,
        "layer": layer,
        "layers": int(weights.cross.shape[0]),
        "num_beams": model.generation_config.num_beams,
        "source": sentence,
        "split": split,
        "translation": weights.translation,
    }


def write_model_card(output_dir, config, results, repo_id: str | None = None, **kwargs) -> str:
    """Write `output_dir/README.md` (the Hub model card) and return its path.

    Args:
        output_dir: the checkpoint directory that will be pushed (created if missing).
        config: the model's `VanillaTransformerConfig`.
        results: the run's results dict, or the path of its JSON file (schema in the module docstring).
        repo_id: the Hub repo the model goes to ("namespace/name"), used in the usage snippets.
        **kwargs: `model_name`, `license` (default "apache-2.0"), extra `tags`, `template_path`, `shipped_name`.
    """
    card = render_model_card(config, results, repo_id, **kwargs)
    path = Path(output_dir) / "README.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    card.save(path)
    logger.info("model card written to %s", path)
    return str(path)


def render_unevaluated_card(repo_id: str) -> ModelCard:
    """The card of a model published before it was evaluated (no results JSON): metadata and usage, and a line
    that says there are no results. `render_model_card` writes every card that has them."""
    data = ModelCardData(license="apache-2.0", library_name="transformers", pipeline_tag="translation", tags=TAGS)
    return ModelCard(
        f"---\n{data.to_yaml()}\n---\n\n# {repo_id.split('/')[-1]}\n\n"
        f"A Transformer translation model ([Attention Is All You Need]({PAPER_URL})) trained with the "
        "vanilla-transformer package. No evaluation results were published with it.\n\n"
        "```python\nfrom transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n\n"
        f"tokenizer = AutoTokenizer.from_pretrained({repo_id!r})\n"
        f"model = AutoModelForSeq2SeqLM.from_pretrained({repo_id!r}, trust_remote_code=True)\n```\n"
    )


__all__ = [
    "ATTENTION_FIGURE",
    "PAPER_DEFAULTS",
    "compare_with_paper",
    "detect_preset",
    "load_results",
    "local_dataset_name",
    "paper_deviations",
    "render_model_card",
    "render_unevaluated_card",
    "write_attention_figure",
    "write_model_card",
]
