"""The demo's Gradio page: `build_demo` wires the computation (computation.py) and the HTML views (views.py) into
Gradio Blocks, one column per model when two are compared; `launch_demo` serves it. Gradio is imported only in these
functions (the `demo` extra).
"""

from __future__ import annotations

import html
import logging
import os

from ..precision import use_attention
from .computation import DECODINGS, Decoding, alignment_layer, run_translation
from .views import DEMO_CSS, alignment_html, attention_html, steps_html


logger = logging.getLogger(__name__)

DEMO_HINT = "install the demo extra: pip install '.[demo]' in the vanilla-transformer clone (or pip install gradio)"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
# The queue: one translation at a time (a CPU-bound model gains nothing from running two at once on shared cores),
# and at most QUEUE_SIZE waiting; more visitors get Gradio's "queue is full" answer instead of an unbounded wait.
CONCURRENCY = 1
QUEUE_SIZE = 64


def import_gradio():
    """gradio, with its usage statistics off; ImportError naming the extra when it is missing."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio
    except ImportError:
        raise ImportError(f"The demo needs gradio: {DEMO_HINT}") from None
    return gradio


def theme():
    """Gradio's default theme with system fonts: the page then asks no font server for anything."""
    gr = import_gradio()
    return gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])


def translate_for_page(
    model, tokenizer, text, mode, num_beams, length_penalty, temperature, top_k, top_p, seed, layer
):
    """The page's handler: (translation, notice, cross, encoder, decoder, steps, alignment HTML, weights). Never
    raises for what a visitor can type or choose: a bad choice or an unexpected failure becomes the notice. The
    notice is Markdown on the page, so its "<" and "&" (of "</s>", of the visitor's text it quotes) are escaped."""
    empty = ("", "", "", "", "", "", "", None)
    try:
        decoding = Decoding(
            mode=mode or "model default",
            num_beams=int(num_beams or 1),
            length_penalty=float(length_penalty if length_penalty is not None else 1.0),
            temperature=float(temperature if temperature is not None else 1.0),
            top_k=int(top_k or 0),
            top_p=float(top_p if top_p is not None else 1.0),
            seed=int(seed or 0),
        )
        result = run_translation(model, tokenizer, text if isinstance(text, str) else "", decoding)
    except ValueError as error:
        return ("", html.escape(f"\u26a0 {error}", quote=False), *empty[2:])
    except Exception:  # the server must answer, whatever happened: the visitor sees one line, the log the rest
        logger.exception("The demo failed to translate %r", (text or "")[:200])
        return ("", "\u26a0 The translation failed (an internal error, logged on the server).", *empty[2:])
    notice = html.escape(result.notice, quote=False)
    if result.weights is None:
        return (result.translation, notice, *empty[2:])
    return (
        result.translation,
        notice,
        attention_html(result.weights, "cross"),
        attention_html(result.weights, "encoder"),
        attention_html(result.weights, "decoder"),
        steps_html(result),
        alignment_html(result.weights, alignment_layer(layer, result.weights)),
        result.weights,
    )


def compare_for_page(sides, text, mode, num_beams, length_penalty, temperature, top_k, top_p, seed, *layers):
    """The page's handler for the models `sides` ([(model, tokenizer, name), ...], one `layers` value each): each
    model's `translate_for_page` outputs, grouped by output: (translation of each model, the notice, each model's
    cross-attention, ..., each model's alignment, each model's weights). For one model, `translate_for_page`'s."""
    controls = (mode, num_beams, length_penalty, temperature, top_k, top_p, seed)
    outputs = [
        translate_for_page(model, tokenizer, text, *controls, layer)
        for (model, tokenizer, _), layer in zip(sides, layers, strict=True)
    ]
    by_output = list(zip(*outputs))  # one tuple per output: its value for each model
    notices = by_output[1]
    notice = notices[0]
    if any(n != notice for n in notices):  # one model's own trouble (a failure), told with its name
        notice = "\n\n".join(f"**{html.escape(name)}**: {n}" for (*_, name), n in zip(sides, notices) if n)
    return (*by_output[0], notice, *(value for values in by_output[2:] for value in values))


def build_demo(model, tokenizer, *, model_name: str = "model", compare: tuple | None = None):
    """The Gradio Blocks of the page for `model` (not launched: `launch_demo` does, with the theme and CSS).

    `compare=(model_b, tokenizer_b, name_b)`: the page translates with both models (each with its own generation
    config by default; the decoding controls apply to both) and shows the two translations and, in every view, the
    two models' views side by side, each column headed by its model's name. Each model reads the sentence with its
    own tokenizer: the two may have other vocabularies and other target languages (the command line checks that they
    read one source language, when their results.json say which)."""
    gr = import_gradio()
    sides = _sides(model, tokenizer, model_name, compare)
    names = [name for _, _, name in sides]
    suffixes = _suffixes(len(sides))

    def handler(*inputs):
        return compare_for_page(sides, *inputs)

    def realign(weights, layer):
        if weights is None:
            return ""
        return alignment_html(weights, alignment_layer(layer, weights))

    title = " vs ".join(names)
    heading = (
        "type a sentence, translate it, and look at what the model attended to."
        if len(sides) == 1
        else "type a sentence, translate it with both models, and compare what each attended to."
    )
    with gr.Blocks(title=f"vanilla-transformer: {title}", analytics_enabled=False) as demo:
        gr.Markdown(f"## {html.escape(title)}\nThe Transformer of *Attention Is All You Need*: {heading}")
        with gr.Row():
            source = gr.Textbox(label="Source", lines=3, elem_id="vt-source", placeholder="A man is riding a bicycle.")
            translations = [
                gr.Textbox(
                    label="Translation" if len(sides) == 1 else f"Translation: {name}",
                    lines=3,
                    elem_id=f"vt-translation{suffix}",
                    interactive=False,
                )
                for name, suffix in zip(names, suffixes)
            ]
        notice = gr.Markdown(elem_id="vt-notice")
        with gr.Row():
            mode = gr.Radio(list(DECODINGS), value="model default", label="Decoding", elem_id="vt-mode")
            button = gr.Button("Translate", variant="primary", elem_id="vt-translate")
        controls = _decoding_controls(gr, model.generation_config)
        weights = [gr.State(None) for _ in sides]
        cross, encoder, decoder, steps, layers, alignments = _views(gr, sides)
        inputs = [source, mode, *controls, *layers]
        outputs = [*translations, notice, *cross, *encoder, *decoder, *steps, *alignments, *weights]
        button.click(handler, inputs, outputs, api_name="translate")
        source.submit(handler, inputs, outputs, api_name=False)
        for state, layer, alignment in zip(weights, layers, alignments):
            layer.change(realign, [state, layer], alignment, api_name=False)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def _sides(model, tokenizer, model_name: str, compare: tuple | None) -> list[tuple]:
    """(model, tokenizer, name) of each model of the page. Each model is switched to eager attention once, so that
    `attention_weights` need not switch it per request (which concurrent requests would race on)."""
    sides = [(model, tokenizer, model_name)]
    if compare is not None:
        sides.append(tuple(compare))
    for side, _, _ in sides:
        use_attention(side, "eager")
        side.eval()
    return sides


def _suffixes(count: int) -> list[str]:
    """The suffix of each model's element ids: none for one model, "-a" and "-b" for two."""
    return [""] if count == 1 else ["-a", "-b"]


def _decoding_controls(gr, config) -> list:
    """The controls after the decoding mode, in the order `translate_for_page` takes them: beam size, length
    penalty, temperature, top-k, top-p, seed; the first two start at the model's generation config."""
    with gr.Accordion("Decoding options", open=False):
        with gr.Row():
            beams = gr.Slider(1, 16, value=config.num_beams or 1, step=1, label="Beam size (beam search)")
            penalty = gr.Slider(0.0, 2.0, value=config.length_penalty or 1.0, step=0.1, label="Length penalty")
        with gr.Row():
            temperature = gr.Slider(0.1, 2.0, value=1.0, step=0.1, label="Temperature (sampling)")
            top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)")
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
            seed = gr.Number(value=0, precision=0, label="Seed")
    return [beams, penalty, temperature, top_k, top_p, seed]


def _views(gr, sides: list[tuple]) -> tuple:
    """The five tabs (cross-, encoder and decoder attention, decoding steps, word alignment), each with one view per
    model: (cross, encoder, decoder, steps, alignment layers, alignments), each a list over the models."""

    def html_view(name):
        return lambda _, suffix: gr.HTML(elem_id=f"vt-{name}-view{suffix}")

    def alignment_column(index, suffix):
        layers = sides[index][0].config.decoder_layers
        layer = gr.Dropdown(
            [(f"layer {i}", i) for i in range(layers)],
            value=layers - 1,
            label="Cross-attention layer",
            elem_id=f"vt-layer{suffix}" if suffix else None,
        )
        return layer, gr.HTML(elem_id=f"vt-alignment-view{suffix}")

    names = [name for _, _, name in sides]
    with gr.Tabs():
        with gr.Tab("Cross-attention", elem_id="vt-tab-cross"):
            cross = _side_by_side(gr, names, html_view("cross"))
        with gr.Tab("Encoder self-attention", elem_id="vt-tab-encoder"):
            encoder = _side_by_side(gr, names, html_view("encoder"))
        with gr.Tab("Decoder self-attention", elem_id="vt-tab-decoder"):
            decoder = _side_by_side(gr, names, html_view("decoder"))
        with gr.Tab("Decoding steps", elem_id="vt-tab-steps"):
            steps = _side_by_side(gr, names, html_view("steps"))
        with gr.Tab("Word alignment", elem_id="vt-tab-alignment"):
            layers, alignments = zip(*_side_by_side(gr, names, alignment_column))
    return cross, encoder, decoder, steps, layers, alignments


def _side_by_side(gr, names: list[str], make) -> list:
    """`make(index, suffix)` for each model: as is for one model, else in columns headed by the models' names."""
    if len(names) == 1:
        return [make(0, "")]
    made = []
    with gr.Row(equal_height=False):
        for index, (name, suffix) in enumerate(zip(names, _suffixes(len(names)))):
            with gr.Column(min_width=0):
                gr.Markdown(f"**{html.escape(name)}**", elem_classes="vt-model-name")
                made.append(make(index, suffix))
    return made


def launch_demo(demo, *, host: str | None = DEFAULT_HOST, port: int | None = DEFAULT_PORT, share: bool = False, **kw):
    """Start the page's server (blocks unless `prevent_thread_lock=True`); host None = Gradio's own default
    (GRADIO_SERVER_NAME, as on a Space). Returns what `Blocks.launch` returns."""
    return demo.launch(
        server_name=host,
        server_port=port,
        share=share,
        theme=theme(),
        css=DEMO_CSS,
        footer_links=["api"],
        **kw,
    )


__all__ = [
    "CONCURRENCY",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEMO_HINT",
    "QUEUE_SIZE",
    "build_demo",
    "compare_for_page",
    "import_gradio",
    "launch_demo",
    "theme",
    "translate_for_page",
]
