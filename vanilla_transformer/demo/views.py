"""The demo page's HTML views of one translation (attention heatmaps, decoding steps, word alignment) and its CSS,
rendered from the Jinja2 templates in templates/ with autoescaping on: every token and word a visitor's text brings
is escaped there, never pasted into markup.

The functions here only lay out what `computation.py` computed (crop a long sentence, format and shade the
weights, place the words of the alignment); the markup is in the templates.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

from ..evaluation.attention import AttentionWeights
from .computation import SPECIAL, Result, word_alignment


TEMPLATES = Path(__file__).resolve().parent / "templates"
DEMO_CSS = (TEMPLATES / "demo.css").read_text(encoding="utf-8")
DIGITS = 4  # decimals of the weights shown (and of their data-w attributes)
# What the page draws of a long translation (a 1,000-token paste would otherwise make megabytes of HTML): heatmaps of
# the first SHOWN_TOKENS queries and keys, the first SHOWN_STEPS decoding steps (hypotheses by their last
# computation.TAIL tokens). A notice above a cropped view says so.
SHOWN_TOKENS = 64
SHOWN_STEPS = 100


def weight(value: float) -> str:
    """A weight as the page shows it (and as its data-w attributes hold it): DIGITS decimals."""
    return f"{value:.{DIGITS}f}"


def shade(value: float) -> str:
    """The CSS class of a weight's background: w0 (under 0.1) to w9 (0.9 and more)."""
    return f"w{min(int(value * 10), 9)}"


@cache
def environment() -> jinja2.Environment:
    """The templates' environment: autoescape on for every template, unknown names an error."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters.update(weight=weight, shade=shade)
    env.globals.update(zip=zip, special=SPECIAL)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)


def attention_html(weights: AttentionWeights, kind: str) -> str:
    """A layer x head grid of heatmaps of `kind` attention ("cross", "encoder", "decoder"), each row of the grid
    ending with the mean of that layer's heads (templates/attention.html)."""
    tensor = weights.of(kind)
    if kind == "cross":
        rows, columns = weights.target_tokens, weights.source_tokens
        legend = "Rows: the target token written; columns: the source tokens it looked at."
    elif kind == "encoder":
        rows = columns = weights.source_tokens
        legend = "Rows: each source token (query); columns: the source tokens it attends to (keys)."
    else:
        rows = columns = weights.decoder_input_tokens
        legend = (
            "Rows: each decoder position, by the token it reads (query); columns: the earlier ones (keys, masked)."
        )
    note = ""
    if len(rows) > SHOWN_TOKENS or len(columns) > SHOWN_TOKENS:
        note = f" Shown: the first {SHOWN_TOKENS} tokens of each side (of {len(rows)} x {len(columns)})."
        rows, columns = rows[:SHOWN_TOKENS], columns[:SHOWN_TOKENS]
        tensor = tensor[:, :, :SHOWN_TOKENS, :SHOWN_TOKENS]

    def panel(layer: int, head, matrix) -> dict:
        cells = [[(shade(w), weight(w)) for w in values] for values in matrix.tolist()]
        caption = f"layer {layer}, {'mean of heads' if head == 'mean' else f'head {head}'}"
        return {"layer": layer, "head": head, "caption": caption, "rows": list(zip(rows, cells))}

    layers = [
        [panel(layer, h, tensor[layer, h]) for h in range(tensor.shape[1])]
        + [panel(layer, "mean", tensor[layer].mean(dim=0))]
        for layer in range(tensor.shape[0])
    ]
    row_name, column_name = ("target", "source") if kind == "cross" else ("query", "key")
    return render(
        "attention.html",
        kind=kind,
        legend=legend,
        note=note,
        columns=columns,
        layers=layers,
        row_name=row_name,
        column_name=column_name,
    )


def steps_html(result: Result) -> str:
    """The decoding step by step: one collapsible section per step with its candidates and where the step's
    cross-attention looked (templates/steps.html)."""
    return render(
        "steps.html",
        steps=result.steps[:SHOWN_STEPS],
        total=len(result.steps),
        num_beams=result.num_beams,
        gnmt=result.length_penalty_form == "gnmt",
        weights=result.weights,
    )


def alignment_html(weights: AttentionWeights, layer: int = -1) -> str:
    """The word alignment drawn as an SVG: source words above, target words below, a line per link
    (templates/alignment.html)."""
    source, target, links = word_alignment(weights, layer)
    char = 8.5  # about the width of a character of the SVG's 14px text

    def place(words):
        xs, x = [], 10.0
        for w in words:
            width = max(len(w), 2) * char + 16
            xs.append(x + width / 2)
            x += width
        return xs, x

    xs_source, width_source = place(source)
    xs_target, width_target = place(target)
    return render(
        "alignment.html",
        empty=not source or not target,
        layer=layer % weights.cross.shape[0],
        width=max(width_source, width_target) + 10,
        links=[
            {
                "x1": xs_source[s],
                "x2": xs_target[t],
                "w": w,
                "source": s,
                "target": t,
                "source_word": source[s],
                "target_word": target[t],
            }
            for t, s, w in links
        ],
        words=[
            {"x": x, "y": y, "text": word}
            for words, xs, y in ((source, xs_source, 24), (target, xs_target, 136))
            for word, x in zip(words, xs)
        ],
    )


__all__ = ["DEMO_CSS", "DIGITS", "SHOWN_STEPS", "SHOWN_TOKENS", "alignment_html", "attention_html", "steps_html"]
