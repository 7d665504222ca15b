"""What a trained model attends to: the attention figures of the paper's appendix (Figures 3-5), for any checkpoint.

    from vanilla_transformer.evaluation.attention import attention_figure
    fig = attention_figure(model, tokenizer, "A man is riding a bicycle.", kind="cross", layer=4)
    fig.savefig("cross.png")

or `vanilla-transformer attention --model PATH_OR_REPO "A man is riding a bicycle." --output cross.png`.

The weights are the model's own: one forward pass with `output_attentions=True, return_dict=True`, reading
`encoder_attentions`, `decoder_attentions` and `cross_attentions` of the `Seq2SeqLMOutput` (one tensor
[batch, heads, queries, keys] per layer). Nothing else of the model is used, so a model loaded from a checkpoint's
own code (`trust_remote_code=True`, class from `transformers_modules`) works like one of this package; and this
module imports nothing from the package (torch always, matplotlib only to draw), so it can even be loaded by
path beside such a checkpoint. For the same reason `eager_attention`, the block that needs the weights, switches the
model itself rather than through `precision.use_attention`.

The target is either generated (by default with the model's generation config, section 6.1) or given; it is then fed to the decoder as in
training (teacher forcing): decoder position i reads `<s>` (i = 0) or target token i - 1 and predicts target
token i. Hence two labellings of the decoder side:
  * cross-attention rows are labelled by the token the position predicts (`target_tokens`), the convention of
    alignment extraction (fairseq's `--print-alignment`): the row of "Fahrrad" shows where the model looked while
    writing "Fahrrad";
  * decoder self-attention is drawn on what the positions read (`decoder_input_tokens`), queries and keys alike.

Two kinds of figure:
  * "cross": alignment heatmaps, source subwords (columns) x target subwords (rows), one panel per head and one
    for the mean of the heads shown, for one layer or all layers;
  * "encoder" / "decoder": self-attention in the paper's style: the sentence written twice, the upper copy the
    queries and the lower copy the keys, a line from each query to each key with width and opacity proportional
    to the weight, one colour per head, one panel per layer.
Tokens are the subword pieces: a piece that starts a word is shown without SentencePiece's "▁" (or byte-level
BPE's "Ġ"), a piece that continues a word gets a leading "##", and special tokens (`</s>`, `<s>`) are shown by
name. Each drawn heatmap / line set carries a gid ("cross/layer=4/head=2", ".../head=mean") naming what it shows.
"""

from __future__ import annotations

import contextlib
import logging
import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

import torch


logger = logging.getLogger(__name__)

KINDS = ("cross", "encoder", "decoder")
WORD_MARKERS = ("\u2581", "\u0120")  # "▁" (SentencePiece / Metaspace, this package's tokenizer), "Ġ" (byte-level)
CONTINUATION = "##"  # shown before a piece that continues a word
LINE_WIDTH = 4.0  # points, of a line of weight 1 in the self-attention figures
DPI = 110  # of saved figures: small tick labels stay legible
PLOT_HINT = (
    "install the plot extra: pip install '.[plot]' in the vanilla-transformer clone (or pip install matplotlib)"
)


@dataclass
class AttentionWeights:
    """The attention weights of one sentence pair, per layer and head, with readable token labels.

    encoder: [layers, heads, source, source]; decoder: [layers, heads, target, target]; cross: [layers, heads,
    target, source]; float32 on the CPU, each row a softmax (sums to 1; masked keys 0).
    """

    source: str
    translation: str  # the target as text: the given one, or the model's (decoded without special tokens)
    generated: bool  # whether the target was generated (True) or given (False)
    source_tokens: list[str]  # one label per source position, </s> included
    target_tokens: list[str]  # one label per decoder position: the token it predicts, </s> included
    decoder_input_tokens: list[str]  # one label per decoder position: the token it reads (<s>, target[:-1])
    encoder: torch.Tensor
    decoder: torch.Tensor
    cross: torch.Tensor
    # `generate`'s output when it was asked for one (`return_dict_in_generate=True`): its scores, for the web demo's
    # step-through view of the same decoding (vanilla_transformer/demo/). None otherwise.
    generation: object | None = None

    def of(self, kind: str) -> torch.Tensor:
        """The weights of `kind` ("cross", "encoder" or "decoder")."""
        _check_kind(kind)
        return getattr(self, kind)


def token_labels(tokenizer, ids) -> list[str]:
    """Readable labels of the pieces `ids`: word-start marker dropped, continuations prefixed with "##", special
    tokens by name (e.g. "</s>"). A piece that is only the marker (a space before a byte-fallback character) stays
    "▁"."""
    pieces = tokenizer.convert_ids_to_tokens([int(i) for i in ids])
    special = set(tokenizer.all_special_ids)
    # A tokenizer whose pieces carry no word-start marker (e.g. WordPiece) is shown as it is.
    marker = next((m for m in WORD_MARKERS if any(p.startswith(m) for p in pieces)), None)
    labels = []
    for token_id, piece in zip(ids, pieces):
        if int(token_id) in special or marker is None:
            labels.append(piece)
        elif piece.startswith(marker):
            labels.append(piece[len(marker) :] or marker)
        else:
            labels.append(CONTINUATION + piece)
    return labels


@torch.no_grad()
def attention_weights(
    model,
    tokenizer,
    source: str,
    target: str | None = None,
    *,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    **generate_kwargs,
) -> AttentionWeights:
    """The encoder, decoder and cross-attention weights of `model` for `source` and its translation.

    Args:
        model: an encoder-decoder (`AutoModelForSeq2SeqLM`), this package's or loaded with `trust_remote_code`.
            With another attention implementation than "eager" (e.g. the default "sdpa", which computes no weights)
            the model is switched to "eager" for the forward pass and switched back afterwards, also on error
            (`eager_attention`); a dropout-free forward needs eval mode, so a model in
            training mode is put in eval mode for the call and back in training mode after.
        tokenizer: the model's tokenizer (appends </s> to the source, as in training).
        source: one sentence.
        target: the translation to analyse; None (default) = the model's own, by beam search.
        num_beams: beam size for the model's translation; None (default) = its generation config's, as `generate`,
            `translate` and the pipeline use it; 1 = greedy.
        max_new_tokens: at most this many generated tokens (default: the model's generation config).
        generate_kwargs: other options of `generate` for the model's translation (`length_penalty`, `do_sample`,
            `logits_processor`, ...). With `return_dict_in_generate=True`, `generate`'s output is kept in
            `AttentionWeights.generation`.
    """
    _check_arguments(source, target, num_beams, generate_kwargs)
    # Without outer whitespace, as the model was trained (`vanilla-transformer train` strips every sentence) and as
    # `translate` gives it: the tokenizer keeps spaces, and a lone "▁" the model never saw would be drawn.
    source = source.strip()
    target = target.strip() if target is not None else None
    # The config's rule (configuration_vanilla_transformer.py), read from the model: this module imports nothing of
    # the package. A config without it (another model, or a checkpoint saved before the rule moved there) sets none.
    rule = getattr(model.config, "input_length_limit", None)
    limit = rule(tokenizer) if rule is not None else None
    source_ids = tokenizer(source, verbose=False)["input_ids"]  # too long: the error below, alone
    if limit is not None and len(source_ids) > limit:
        raise ValueError(
            f"`source` has {len(source_ids)} tokens (</s> included) but the model takes at most {limit}: "
            f"pass a shorter sentence."
        )
    start = model.config.decoder_start_token_id
    if start is None:
        start = model.generation_config.decoder_start_token_id
    device = model.device
    input_ids = torch.tensor([source_ids], device=device)
    was_training = model.training
    model.eval()
    try:
        if target is None:
            kwargs = {"num_beams": num_beams} if num_beams is not None else {}
            if max_new_tokens is not None:
                kwargs["max_new_tokens"] = max_new_tokens
            target_ids, generation = _generated_ids(model, input_ids, tokenizer.eos_token_id, kwargs | generate_kwargs)
        else:
            target_ids, generation = tokenizer(text_target=target, verbose=False)["input_ids"], None
            # Only a translation passed in: the model's own is what `generate` gave (sinusoids have every position).
            if limit is not None and len(target_ids) > limit:
                raise ValueError(
                    f"`target` has {len(target_ids)} tokens (</s> included) but the model takes at most "
                    f"{limit}: pass a shorter translation."
                )
        decoder_input_ids = [start] + target_ids[:-1]  # "shifted right" (section 3.1)
        outputs = _forward_with_weights(model, input_ids, torch.tensor([decoder_input_ids], device=device))
    finally:
        model.train(was_training)
    weights = _stacked_weights(outputs)
    translation = target if target is not None else tokenizer.decode(target_ids, skip_special_tokens=True).strip()
    return AttentionWeights(
        source=source,
        translation=translation,
        generated=target is None,
        source_tokens=token_labels(tokenizer, source_ids),
        target_tokens=token_labels(tokenizer, target_ids),
        decoder_input_tokens=token_labels(tokenizer, decoder_input_ids),
        generation=generation,
        **weights,
    )


def _check_arguments(source, target, num_beams, generate_kwargs: dict) -> None:
    """`attention_weights`' arguments, each refused with a ValueError naming it."""
    if target is not None and generate_kwargs:
        raise ValueError(
            f"Options of `generate` ({', '.join(generate_kwargs)}) need `target=None`: nothing is generated."
        )
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"`source` must be a non-empty sentence, got {source!r}.")
    if target is not None and (not isinstance(target, str) or not target.strip()):
        raise ValueError(f"`target` must be a non-empty sentence or None (translate the source), got {target!r}.")
    # Not generation_vanilla_transformer.check_decoding: this module imports nothing from the package (its docstring).
    if num_beams is not None and (isinstance(num_beams, bool) or not isinstance(num_beams, int) or num_beams < 1):
        raise ValueError(f"`num_beams` must be a positive integer or None (the model's own), got {num_beams!r}.")


def _generated_ids(model, input_ids: torch.Tensor, eos: int, generate_kwargs: dict) -> tuple[list[int], object]:
    """(the model's translation of `input_ids` as target ids up to its </s>, `generate`'s output when it returned a
    dict, else None)."""
    generation = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), **generate_kwargs)
    sequence = (generation.sequences if hasattr(generation, "sequences") else generation)[0]
    generation = generation if hasattr(generation, "sequences") else None
    target_ids = sequence.tolist()[1:]  # generate starts every sequence with the decoder start token
    if eos in target_ids:
        target_ids = target_ids[: target_ids.index(eos) + 1]
    return target_ids, generation


def _stacked_weights(outputs) -> dict[str, torch.Tensor]:
    """{"encoder", "decoder", "cross"} -> the forward pass's weights of the one sentence, [layers, heads, ...]."""
    weights = {}
    for kind, name in (
        ("encoder", "encoder_attentions"),
        ("decoder", "decoder_attentions"),
        ("cross", "cross_attentions"),
    ):
        per_layer = getattr(outputs, name, None)
        if not per_layer:
            raise ValueError(f"The model returned no `{name}` with output_attentions=True: it cannot be drawn.")
        weights[kind] = torch.stack([w[0] for w in per_layer]).float().cpu()
    return weights


@contextlib.contextmanager
def eager_attention(model):
    """`model` on the eager attention inside the `with` block, the one implementation that returns the attention
    weights (`output_attentions=True`; SDPA computes none); its own implementation is restored after."""
    # Not precision.use_attention: this module imports nothing from the package (its docstring).
    previous = model.config._attn_implementation  # transformers keeps the resolved implementation only there
    if previous != "eager":
        logger.info("The model uses %r attention, which returns no weights: 'eager' for this call.", previous)
        model.set_attn_implementation("eager")
    try:
        yield model
    finally:
        if previous != "eager":
            model.set_attn_implementation(previous)


def _forward_with_weights(model, input_ids, decoder_input_ids):
    """One teacher-forced forward pass with `output_attentions=True` on the eager attention path."""
    with eager_attention(model):
        return model(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            decoder_input_ids=decoder_input_ids,
            output_attentions=True,
            return_dict=True,
            use_cache=False,
        )


# ------------------------------------------------------------------------------------------------ drawing


def _check_kind(kind):
    if kind not in KINDS:
        raise ValueError(f"`kind` must be one of {list(KINDS)}, got {kind!r}.")


def select_layers(weights: torch.Tensor, layer) -> list[int]:
    """The layer indices `layer` names in `weights` ([layers, heads, ...]): see `layer_indices`."""
    return layer_indices(weights.shape[0], layer)


def layer_indices(count: int, layer) -> list[int]:
    """The indices of `count` layers that `layer` names: None = all, else one index (negative counts from the last).
    The command line checks `--layer` with it against the config, before the model is loaded."""
    if layer is None:
        return list(range(count))
    if isinstance(layer, bool) or not isinstance(layer, int) or not -count <= layer < count:
        raise ValueError(
            f"`layer` must be None (all layers) or an index in [0, {count}) (negative counts from the "
            f"last); the model has {count} layers, got {layer!r}."
        )
    return [layer % count]


def select_heads(weights: torch.Tensor, heads) -> list[int]:
    """The head indices `heads` names in `weights` ([layers, heads, ...]): see `head_indices`."""
    return head_indices(weights.shape[1], heads)


def head_indices(count: int, heads) -> list[int]:
    """The indices of `count` heads that `heads` names: "all", one index, or a sequence of indices (or a string
    "0,3"). The command line checks `--heads` with it against the config, before the model is loaded."""
    if heads == "all":
        return list(range(count))
    if isinstance(heads, str):
        try:
            heads = [int(h) for h in heads.split(",")]
        except ValueError:
            raise ValueError(f"`heads` must be 'all' or head indices such as '0,3', got {heads!r}.") from None
    elif isinstance(heads, int) and not isinstance(heads, bool):
        heads = [heads]
    heads = list(heads) if isinstance(heads, Iterable) else [heads]
    bad = [h for h in heads if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h < count]
    if not heads or bad:
        raise ValueError(
            f"`heads` must be 'all' or indices in [0, {count}) (this attention has {count} heads), got "
            f"{bad if bad else heads!r}."
        )
    return sorted(set(heads))


def require_matplotlib():
    """matplotlib's bare `Figure` class; ImportError saying how to install matplotlib when it is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(f"Drawing attention needs matplotlib: {PLOT_HINT}") from None
    # A bare Figure (no pyplot): renders with Agg when saved, leaves the user's pyplot backend alone, and is not
    # kept alive by pyplot's figure registry.
    return Figure


def save_formats() -> list[str]:
    """The file extensions a figure can be saved as (png, svg, pdf, ...: matplotlib's `savefig` formats)."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    return sorted(FigureCanvasBase.get_supported_filetypes())


def draw_attention(weights: AttentionWeights, kind: str = "cross", layer: int | None = None, heads="all"):
    """A matplotlib Figure of `weights` (see the module docstring for the kinds); `layer` None = every layer."""
    _check_kind(kind)
    tensor = weights.of(kind)
    layers, chosen = select_layers(tensor, layer), select_heads(tensor, heads)
    figure = require_matplotlib()
    made_by = "the model's translation" if weights.generated else "the given translation"
    lines = [f"source: {weights.source}"] + ([] if kind == "encoder" else [f"{made_by}: {weights.translation}"])
    if kind == "cross":
        return _draw_heatmaps(figure, tensor, layers, chosen, weights.source_tokens, weights.target_tokens, lines)
    tokens = weights.source_tokens if kind == "encoder" else weights.decoder_input_tokens
    return _draw_lines(figure, tensor, layers, chosen, tokens, kind, lines)


def _suptitle(fig, lines):
    # Long sentences are wrapped to the figure's width (about 14 characters per inch at 9 points).
    columns = max(30, int(fig.get_figwidth() * 14))
    fig.suptitle("\n".join(textwrap.fill(line, columns) for line in lines), fontsize=9)


def _draw_heatmaps(figure_class, tensor, layers, heads, source_tokens, target_tokens, lines):
    # One row of panels per layer: each chosen head, then their mean. A single layer wraps its panels into the grid
    # closest to a 16:10 landscape page (a long target gives tall panels: then one row).
    panels = len(heads) + 1
    cell = 0.24  # inches per token
    width = max(2.2, cell * len(source_tokens) + 1.2)
    height = max(2.2, cell * len(target_tokens) + 1.2)
    if len(layers) > 1:
        columns = panels
    else:
        columns = min(
            range(1, panels + 1), key=lambda c: abs(math.log(c * width / (math.ceil(panels / c) * height) / 1.6))
        )
    rows = len(layers) * math.ceil(panels / columns)
    fig = figure_class(figsize=(columns * width + 1.0, rows * height + 1.0), layout="constrained")
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax in axes.flat:
        ax.set_axis_off()
    image = None
    for layer_number, layer_index in enumerate(layers):
        matrices = [(f"head {h}", str(h), tensor[layer_index, h]) for h in heads]
        shown = "heads" if len(heads) == tensor.shape[1] else "heads " + ", ".join(map(str, heads))
        matrices.append((f"mean of {shown}", "mean", tensor[layer_index, heads].mean(dim=0)))
        for panel, (name, gid, matrix) in enumerate(matrices):
            row = layer_number * math.ceil(panels / columns) + panel // columns
            ax = axes[row, panel % columns]
            ax.set_axis_on()
            image = ax.imshow(
                matrix.numpy(), cmap="Blues", vmin=0.0, vmax=1.0, aspect="equal", interpolation="nearest"
            )
            image.set_gid(f"cross/layer={layer_index}/head={gid}")
            ax.set_title(f"layer {layer_index}, {name}", fontsize=9)
            ax.set_xticks(range(len(source_tokens)), source_tokens, rotation=90, fontsize=7)
            ax.set_yticks(range(len(target_tokens)), target_tokens, fontsize=7)
            ax.tick_params(length=0)
    fig.colorbar(image, ax=axes, shrink=0.5, label="attention weight")
    _suptitle(fig, ["Cross-attention (rows: target tokens, columns: source tokens)", *lines])
    return fig


def _head_colours(count: int):
    from matplotlib import colormaps

    name = "tab10" if count <= 10 else "tab20"
    colours = colormaps[name].colors
    return [colours[i % len(colours)] for i in range(count)]


def _draw_lines(figure_class, tensor, layers, heads, tokens, kind, lines):
    # The paper's Figures 3-5: the sentence twice, queries above, keys below, a line per (query, key, head).
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Patch

    n = len(tokens)
    colours = _head_colours(tensor.shape[1])
    segments = [[(i, 1.0), (j, 0.0)] for i in range(n) for j in range(n)]
    fig = figure_class(figsize=(max(6.0, 0.42 * n + 1.5), 3.0 * len(layers) + 1.2), layout="constrained")
    axes = fig.subplots(len(layers), 1, squeeze=False)[:, 0]
    for ax, layer_index in zip(axes, layers):
        for h in heads:
            weight = tensor[layer_index, h].reshape(-1).numpy()  # row-major: (query i, key j) = segments' order
            colour = [(*colours[h], float(w)) for w in weight]
            collection = LineCollection(segments, colors=colour, linewidths=LINE_WIDTH * weight, capstyle="round")
            collection.set_gid(f"{kind}/layer={layer_index}/head={h}")
            ax.add_collection(collection)
        for y, va in ((1.0, "bottom"), (0.0, "top")):
            for i, token in enumerate(tokens):
                ax.text(i, y + (0.03 if y else -0.03), token, rotation=90, ha="center", va=va, fontsize=8)
        ax.set_xlim(-1.2, n - 0.4)
        ax.set_ylim(-0.05, 1.05)
        ax.set_axis_off()
        ax.text(-0.7, 0.5, f"layer {layer_index}", rotation=90, ha="right", va="center", fontsize=9)
    legend = [Patch(color=colours[h], label=f"head {h}") for h in heads]
    fig.legend(handles=legend, loc="outside lower center", ncols=min(len(heads), 8), fontsize=8, frameon=False)
    what = "Encoder" if kind == "encoder" else "Decoder (masked)"
    heading = f"{what} self-attention, queries (top) to keys (bottom); width and opacity = weight"
    _suptitle(fig, [heading, *lines])
    return fig


def attention_figure(
    model,
    tokenizer,
    source: str,
    target: str | None = None,
    *,
    kind: str = "cross",
    layer: int | None = None,
    heads="all",
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    output=None,
):
    """Translate `source` (or take `target`) and draw `kind` attention of `layer` (None = all) for `heads`.

    Returns the matplotlib Figure; with `output` (a path such as "cross.png") it is also saved there. Arguments as
    in `attention_weights` and `draw_attention`.
    """
    _check_kind(kind)
    require_matplotlib()  # a missing matplotlib fails before the model runs
    weights = attention_weights(model, tokenizer, source, target, num_beams=num_beams, max_new_tokens=max_new_tokens)
    figure = draw_attention(weights, kind, layer, heads)
    if output is not None:
        figure.savefig(output, dpi=DPI)
    return figure


__all__ = [
    "DPI",
    "AttentionWeights",
    "attention_figure",
    "attention_weights",
    "draw_attention",
    "eager_attention",
    "head_indices",
    "layer_indices",
    "require_matplotlib",
    "save_formats",
    "select_heads",
    "select_layers",
    "token_labels",
]
