"""The web demo package: a Gradio page that translates what a visitor types and shows how the model got there.

    vanilla-transformer demo --model runs/en-de            # http://127.0.0.1:7860
    vanilla-transformer demo --model your-name/transformer-en-de --write_space space/ --requirement SPEC
    vanilla-transformer demo --model runs/en-de --compare runs/en-de/averaged   # two models side by side

Its parts: `computation.py` computes (the translation, its attention, the decoding steps, the word alignment: data,
no HTML), `views.py` renders that as HTML from the Jinja2 templates in `templates/` (with the page's CSS),
`page.py` wires both into Gradio (`build_demo`, `launch_demo`), `space.py` writes a Hugging Face Space that runs it.

See docs/demo.md for what each view shows. The page has five views of one translation, all read from one call of
`evaluation.attention.attention_weights` (the same function as the `attention` figures, so the page and the figures
cannot disagree):
  * the translation, by default with the model's generation config (beam and length penalty as the model saved
    them: docs/model.md), or greedy, another beam size / length penalty, or sampling;
  * attention as HTML heatmaps: cross-attention as a layer x head grid plus the mean of the heads, encoder and
    decoder self-attention likewise; every cell carries its weight (`data-w`, rounded to `DIGITS` decimals) and a
    hover text naming both tokens;
  * the decoding step by step: at each step the beam's candidates with their cumulative log-probabilities, which
    were kept, which ended with `</s>` and which were dropped, and where that step's cross-attention looked. The
    candidates are recomputed from `generate`'s own per-step scores (`output_scores=True`) and the running beams
    recorded at each step (`StepRecorder`), so they are those of the very search that made the translation;
  * a word alignment: each target word linked to the source word its cross-attention (one layer, mean of the
    heads, summed over the subwords of each word) weighs most.

With a second model (`build_demo(..., compare=...)`) the page translates with both and shows each view of the two
translations side by side, each built by the same functions as for one model.

Only page.py uses gradio, imported inside its functions (the `demo` extra): the rest needs no browser and no gradio.
"""

from .computation import (
    DECODINGS,
    MAX_CHARACTERS,
    SPECIAL,
    TAIL,
    Candidate,
    Decoding,
    Result,
    Step,
    StepRecorder,
    VocabularyMismatch,
    alignment_layer,
    check_same_vocabulary,
    decoding_steps,
    prepare_source,
    run_translation,
    vocabulary_difference,
    word_alignment,
    words_of,
)
from .page import (
    CONCURRENCY,
    DEFAULT_HOST,
    DEFAULT_PORT,
    DEMO_HINT,
    QUEUE_SIZE,
    build_demo,
    compare_for_page,
    import_gradio,
    launch_demo,
    theme,
    translate_for_page,
)
from .space import SPACE_APP, SPACE_README, repository_url, space_requirement, write_space
from .views import DEMO_CSS, DIGITS, SHOWN_STEPS, SHOWN_TOKENS, alignment_html, attention_html, steps_html


__all__ = [
    "CONCURRENCY",
    "DECODINGS",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEMO_CSS",
    "DEMO_HINT",
    "DIGITS",
    "MAX_CHARACTERS",
    "QUEUE_SIZE",
    "SHOWN_STEPS",
    "SHOWN_TOKENS",
    "SPACE_APP",
    "SPACE_README",
    "SPECIAL",
    "TAIL",
    "Candidate",
    "Decoding",
    "Result",
    "Step",
    "StepRecorder",
    "VocabularyMismatch",
    "alignment_html",
    "alignment_layer",
    "attention_html",
    "build_demo",
    "check_same_vocabulary",
    "compare_for_page",
    "decoding_steps",
    "import_gradio",
    "launch_demo",
    "prepare_source",
    "repository_url",
    "run_translation",
    "space_requirement",
    "steps_html",
    "theme",
    "translate_for_page",
    "vocabulary_difference",
    "word_alignment",
    "words_of",
    "write_space",
]
