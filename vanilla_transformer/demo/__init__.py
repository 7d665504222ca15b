"""The web demo package: a Gradio page that translates what a visitor types and shows how the model got there.

All of it is in computation.py for now (moved here from demo.py); this file re-exports what the command line, the
Space and the tests use.
"""

from .computation import (
    DECODINGS,
    DEMO_CSS,
    DEMO_HINT,
    SHOWN_STEPS,
    SHOWN_TOKENS,
    TAIL,
    Decoding,
    Result,
    StepRecorder,
    alignment_html,
    attention_html,
    build_demo,
    compare_for_page,
    decoding_steps,
    launch_demo,
    prepare_source,
    repository_url,
    run_translation,
    space_requirement,
    steps_html,
    translate_for_page,
    vocabulary_difference,
    word_alignment,
    write_space,
)


__all__ = [
    "DECODINGS",
    "DEMO_CSS",
    "DEMO_HINT",
    "SHOWN_STEPS",
    "SHOWN_TOKENS",
    "TAIL",
    "Decoding",
    "Result",
    "StepRecorder",
    "alignment_html",
    "attention_html",
    "build_demo",
    "compare_for_page",
    "decoding_steps",
    "launch_demo",
    "prepare_source",
    "repository_url",
    "run_translation",
    "space_requirement",
    "steps_html",
    "translate_for_page",
    "vocabulary_difference",
    "word_alignment",
    "write_space",
]
