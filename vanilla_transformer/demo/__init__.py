"""The web demo: a Gradio page that translates what a visitor types and shows how the model got there (docs/demo.md).

- `computation.py`: one input's translation, its attention, the decoding steps, the word alignment (data, no HTML);
- `views.py` and `templates/`: that data as HTML through Jinja2, with the page's CSS;
- `page.py`: the Gradio page (`build_demo`, `launch_demo`); only it imports gradio (the `demo` extra);
- `space.py`: a Hugging Face Space that runs the page; `commands.py`: `vanilla-transformer demo`.
"""
