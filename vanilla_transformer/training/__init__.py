"""The training layer: the paper's recipe (section 5) on the Hugging Face Trainer.

- `arguments.py`: the options (dataclasses that validate themselves), presets, the grouped `--help`;
- `trainer.py`: `VanillaTransformerTrainer`, the `Seq2SeqTrainer` with the schedule, the loss normalisation, token
  batches and evaluation;
- `callbacks.py`: the time limit, the cool-down planned in the time left, and the progress bar of a timed run;
- `augment.py`: per-update augmentation (subword splitting, bidirectional reversal);
- `report.py`: the end-of-run report (test BLEU, checkpoint averaging, plots, results.json, model cards, the Hub).

The command that runs them is `vanilla_transformer/train.py` (`vanilla-transformer train`).
"""
