"""The training command (`vanilla-transformer train`) and the paper's recipe (section 5) on the Hugging Face Trainer.

- `train.py`: the command: options -> data -> tokenizer -> model -> Trainer -> report;
- `options.py`: the options (dataclasses that validate themselves), the recipes of `recipes/` (`--recipe`), the
  grouped `--help`; `preflight.py`: that `--help` and the checks of the options and the file system, before torch
  (from `options.json`, the options' description);
- `trainer.py`: `build_trainer`, a `VanillaTransformerTrainer` (the `Seq2SeqTrainer` with the schedule, token batches
  and evaluation) given the label-smoothed loss (`LabelSmoothedLoss`) and BLEU; `schedule.py`: the warm-up schedule
  (section 5.3);
- `callbacks.py`: the time limit, the cool-down planned in the time left, and the progress bar of a timed run;
- `augmentation.py`: per-update augmentation (subword splitting, bidirectional reversal; not in the paper);
- `averaging.py`: checkpoint averaging (section 6.1), and `commands.py` its command, `vanilla-transformer average`
  (the checkpoints' names and discovery are vanilla_transformer/checkpoints.py, which the Hub upload reads too);
- `report.py`: the end-of-run report (test BLEU, averaging, plots, results.json, model card, the Hub).
"""
