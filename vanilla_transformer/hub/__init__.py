"""Publishing on the Hugging Face Hub: which files of a run go up and the upload (`push.py`), and the model card
rendered from the run's results (`model_card.py`, template `model_card_template.md`); `commands.py`:
`vanilla-transformer push`."""
