"""What a trained model is worth and what it attends to: BLEU through `evaluate`/sacreBLEU and the paper's tokenized
BLEU (`bleu.py`, with the vendored sacreBLEU metric script in `metrics_sacrebleu/`), and the attention figures of the
paper's appendix (`attention.py`); `commands.py`: `vanilla-transformer attention` and `score`."""
