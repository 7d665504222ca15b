"""The training loss of "Attention Is All You Need": cross-entropy with label smoothing (section 5.4), fused.

A sibling of `modeling_vanilla_transformer.py`, which imports it relatively, so `save_pretrained` copies it into every
checkpoint with the model code: like the modeling file it imports only torch.
"""

import torch


# How many logits (rows x vocabulary) one step of the eager loss copies to float32 at a time: 2^20 (4 MB) on a CPU,
# where a reused small chunk is cheaper than a fresh float32 copy of a batch's logits; elsewhere chunks only bound the
# float32 temporaries' memory. docs/performance.md ("The loss in the model") has the timings.
_LOSS_CHUNK_VALUES = {"cpu": 2**20}
_LOSS_CHUNK_VALUES_DEFAULT = 2**26


class _CrossEntropyTerms(torch.autograd.Function):
    """Per token, from logits `x` [tokens, vocab] (any float dtype) and gold ids `gold` [tokens]: the NLL
    `lse(x) - x[gold]` and the uniform-target term `lse(x) - mean(x)` = mean over the vocabulary of -log p, both in
    float32 (float64 for float64 logits), `lse` the log-sum-exp; the smoothed loss is
    `(1 - label_smoothing_factor) * nll + label_smoothing_factor * uniform`.

    Computed over chunks of rows, so that no float32 [tokens, vocab] tensor (log-probabilities, their gradient) is ever
    whole in memory; the backward recomputes the softmax from the saved logits and writes the gradient
    `(g_nll + g_uniform) * softmax(x) - g_nll * onehot(gold) - g_uniform / vocab` straight in the logits' dtype."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, gold: torch.Tensor, rows: int):
        dtype = torch.promote_types(logits.dtype, torch.float32)
        lse = torch.empty(logits.shape[0], device=logits.device, dtype=dtype)
        mean = torch.empty_like(lse)
        for start in range(0, logits.shape[0], rows):
            chunk = logits[start : start + rows].to(dtype)
            torch.logsumexp(chunk, dim=-1, out=lse[start : start + rows])
            torch.mean(chunk, dim=-1, out=mean[start : start + rows])
        gold_logit = logits.gather(-1, gold.unsqueeze(-1)).squeeze(-1).to(dtype)
        ctx.save_for_backward(logits, gold, lse)
        ctx.rows = rows
        return lse - gold_logit, lse - mean

    @staticmethod
    def backward(ctx, grad_nll: torch.Tensor, grad_uniform: torch.Tensor):
        logits, gold, lse = ctx.saved_tensors
        grad = torch.empty_like(logits)
        scale = (grad_nll + grad_uniform).unsqueeze(-1)
        offset = (grad_uniform / logits.shape[-1]).unsqueeze(-1)
        for start in range(0, logits.shape[0], ctx.rows):
            rows = slice(start, start + ctx.rows)
            # The subtraction makes a new tensor (for float32 logits `.to(lse.dtype)` is the saved tensor itself); the
            # rest is in place on it.
            chunk = (logits[rows].to(lse.dtype) - lse[rows].unsqueeze(-1)).exp_().mul_(scale[rows]).sub_(offset[rows])
            chunk.scatter_add_(-1, gold[rows].unsqueeze(-1), -grad_nll[rows].unsqueeze(-1))
            grad[rows] = chunk
        return grad, None, None


def label_smoothed_cross_entropy(
    logits: torch.Tensor,
    labels: torch.Tensor,
    label_smoothing_factor: float = 0.0,
    ignore_index: int = -100,
    per_sequence: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cross-entropy of `logits` [..., vocab] against `labels` [...], with label smoothing `label_smoothing_factor`
    (the paper's epsilon_ls, section 5.4; 0: the plain cross-entropy, the model's loss), summed over the positions
    whose label is not `ignore_index`. Returns `(loss_sum, nll_sum, n_tokens)`: the smoothed loss, the plain NLL of
    the same tokens (perplexity is computed from it; it carries no gradient) and their count; with `per_sequence`,
    summed over the last dimension of `labels` only (one value per sequence).

    With e = `label_smoothing_factor`, the smoothed target is the one of Szegedy et al. (2016), which the paper cites:
    `(1 - e) * onehot(gold) + e / V` over the whole vocabulary of V tokens, as in `F.cross_entropy(label_smoothing=e)`.
    Per token it is `(1 - e) * NLL + e * mean_v(-log p_v)`, and both terms come from one log-sum-exp: `NLL = lse -
    x_gold`, `mean_v(-log p_v) = lse - mean_v(x_v)`.

    In float32 at least, whatever the logits' dtype: half-precision log-probabilities would lose the small terms of
    the smoothing sum. Eager mode works in chunks of rows (`_CrossEntropyTerms`); under `torch.compile` the formula is
    written out for the compiler to fuse. Padding positions are computed and ignored (selecting them: a host sync)."""
    shape = labels.shape
    logits = logits.reshape(-1, logits.shape[-1])
    labels = labels.reshape(-1).to(logits.device)
    mask = labels != ignore_index
    gold = labels.masked_fill(~mask, 0)
    if torch.compiler.is_compiling():
        x = logits.to(torch.promote_types(logits.dtype, torch.float32))
        lse = torch.logsumexp(x, dim=-1)
        nll = lse - x.gather(-1, gold.unsqueeze(-1)).squeeze(-1)
        uniform = lse - x.mean(dim=-1)
    else:
        values = _LOSS_CHUNK_VALUES.get(logits.device.type, _LOSS_CHUNK_VALUES_DEFAULT)
        nll, uniform = _CrossEntropyTerms.apply(logits, gold, max(1, values // logits.shape[-1]))
    e = label_smoothing_factor
    loss = nll if e == 0 else (1.0 - e) * nll + e * uniform
    zero = nll.new_zeros(())
    sums = (torch.where(mask, loss, zero), torch.where(mask, nll.detach(), zero), mask)
    if per_sequence:
        return tuple(t.view(shape).sum(-1) for t in sums)
    return tuple(t.sum() for t in sums)


def per_target_token(
    loss_sum: torch.Tensor, tokens: torch.Tensor, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """A summed loss divided by its target tokens, or by `num_items_in_batch` when the Trainer passes it (the target
    tokens of the whole update), so that gradient accumulation and data parallelism give the same loss and gradients:
    the model's loss and the trainer's alike."""
    denominator = tokens.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
    if isinstance(denominator, torch.Tensor):
        denominator = denominator.to(loss_sum.device)
    return loss_sum / denominator


__all__ = ["label_smoothed_cross_entropy", "per_target_token"]
