"""The decoding that `generate` hands off: the paper's maximum output length (`SourceLengthLimit`) and beam search
with the paper's length penalty (`gnmt_beam_search`), section 6.1; and the cache's name in the running transformers,
which the model and the search both pass and read.

A remote-code file beside the modeling file, as transformers keeps its search in `generation/` beside its models: it
imports only torch, transformers and its sibling `generation_vanilla_transformer.py` (the rules the search applies),
and the modeling file imports it (a relative import, so `save_pretrained` copies it into every checkpoint).
"""

import dataclasses
import functools

import torch
from torch import nn
from transformers.cache_utils import Cache
from transformers.generation import GenerateBeamEncoderDecoderOutput, LogitsProcessor
from transformers.modeling_outputs import Seq2SeqLMOutput
from transformers.utils.deprecation import deprecate_kwarg

from .generation_vanilla_transformer import beams_to_keep, gnmt_length_penalty


# ---- The transformers releases the model runs on (5.17 and newer): their one difference, in one place ---------------
# transformers 5.24 renamed the cache, as a model's argument and as an output field, from `past_key_values` to
# `cache`; 5.17-5.23 pass and read `past_key_values`. The model and the search say `cache` throughout, and translate at
# their edges with the helpers below. The running release's name is read off its output classes (no version compared).


def cache_field(output_class: type) -> str:
    """The name of `output_class`'s cache field in the running transformers: "cache" (5.24 on) or "past_key_values"."""
    return "cache" if "cache" in {field.name for field in dataclasses.fields(output_class)} else "past_key_values"


CACHE_NAME = cache_field(Seq2SeqLMOutput)  # the name `generate` passes the cache under, and reads it back from


def with_cache(output_class: type, cache: Cache | None, **fields):
    """`output_class(**fields)` holding `cache` in the running transformers' field (one name for all its output
    classes; read once, above: a `dataclasses.fields` call here would break `torch.compile`'s graph)."""
    return output_class(**fields, **{CACHE_NAME: cache})


def cache_of(output) -> Cache | None:
    """The cache an output holds, in the running transformers' field."""
    return getattr(output, CACHE_NAME)


def takes_cache(removed_in: str):
    """A method's `cache` argument, also under the running transformers' name. With 5.24's name, `past_key_values` is
    transformers' deprecated alias, taken with its warning as its own models take it; before 5.24 it is the name
    `generate` passes, taken without a word."""
    if CACHE_NAME == "cache":
        return deprecate_kwarg("past_key_values", removed_in, new_name="cache")

    def decorate(method):
        @functools.wraps(method)
        def renamed(*args, **kwargs):
            if "past_key_values" in kwargs:
                kwargs["cache"] = kwargs.pop("past_key_values")
            return method(*args, **kwargs)

        return renamed

    return decorate


class SourceLengthLimit(LogitsProcessor):
    """Section 6.1: "We set the maximum output length during inference to input length + 50". Forces `</s>` once a
    hypothesis has `source_length + offset` tokens, per sentence, so that a sentence in a padded batch stops where
    it would stop alone. Rows are the batch expanded by beams / returned sequences (batch-major). No host sync: the
    forced rows are selected with `torch.where`."""

    def __init__(self, source_lengths: torch.Tensor, offset: int, eos_token_id: int, cap: int | None = None):
        self.limits = source_lengths.long() + offset
        if cap is not None:  # e.g. a learned position table's size
            self.limits = self.limits.clamp(max=cap)
        self.eos_token_id = eos_token_id

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        limits = self.limits.to(input_ids.device).repeat_interleave(input_ids.shape[0] // self.limits.shape[0])
        generated = input_ids.shape[1] - 1  # the decoder start token is not part of the output
        done = generated >= limits - 1  # the next token is the last one allowed: it must be </s>
        only_eos = torch.full_like(scores[:1], torch.finfo(scores.dtype).min)
        only_eos[:, self.eos_token_id] = 0.0
        return torch.where(done[:, None], only_eos, scores)


@torch.no_grad()
def gnmt_beam_search(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
    """Beam search with the paper's length penalty (section 6.1: "beam search with a beam size of 4 and length penalty
    alpha = 0.6 (Wu et al., 2016)"), as the authors' tensor2tensor searches. `generate` calls it as its decoding loop
    (`custom_generate`) when the length penalty's form is "gnmt", with the beams expanded, the encoder run, the cache
    made, and its logits processors and stopping criteria built; it returns what `generate` returns.

    It is transformers' beam search (its generation/utils.py, 5.24), step for step and operation for operation,
    written over public APIs only (the model's forward, `Cache.reorder_cache`, the processors and criteria), with the
    GNMT rules in the two places where a length penalty acts:

    - a hypothesis that ends is scored log P / ((5 + |Y|) / 6) ** alpha, |Y| its tokens with `</s>`, and every
      candidate of the step that ends may enter the finished set (tensor2tensor's `grow_finished`), not only those
      among the best `num_beams` (transformers' and fairseq's rule);
    - the search stops once no running hypothesis can beat the finished ones: the best running log-probability
      divided by ((5 + L) / 6) ** alpha, L the maximum length for `early_stopping="never"` (alpha >= 0 makes lp grow
      with the length, so that is the best a hypothesis can reach: tensor2tensor's bound, and its result), else the
      current length, as transformers chooses it. `early_stopping=True` keeps transformers' meaning (a sentence ends
      once `num_beams` hypotheses are finished).

    tests/test_gnmt_penalty.py checks it against a plain tensor2tensor search."""
    config = generation_config
    eos = config.eos_token_id
    eos = [] if eos is None else [eos] if isinstance(eos, int) else list(eos)
    num_beams, alpha, early_stopping, max_length = (
        config.num_beams,
        config.length_penalty,
        config.early_stopping,
        config.max_length,
    )
    return_dict = config.return_dict_in_generate
    all_scores = () if return_dict and config.output_scores else None
    raw_logits = () if return_dict and config.output_logits else None
    decoder_attentions = () if return_dict and config.output_attentions else None
    cross_attentions = () if return_dict and config.output_attentions else None
    decoder_hidden_states = () if return_dict and config.output_hidden_states else None
    encoder_outputs = model_kwargs.get("encoder_outputs")
    cache = model_kwargs.pop(CACHE_NAME, None)
    use_cache = model_kwargs.pop("use_cache", True)
    target_mask = model_kwargs.pop("decoder_attention_mask", None)

    device = input_ids.device
    batch_size, cur_len = input_ids.shape[0] // num_beams, input_ids.shape[1]
    prompt_len = cur_len
    # Each step keeps the top 2 x beam candidates (tensor2tensor's 2 * beam_size), so that `num_beams` of them are
    # still running when the best ones all end.
    keep = beams_to_keep(num_beams, eos)

    def unflatten(tensor, width):  # [batch * width, ...] -> [batch, width, ...]
        return tensor.reshape(batch_size, width, *tensor.shape[1:])

    def flatten(tensor):
        return tensor.reshape(-1, *tensor.shape[2:])

    def gather(tensor, indices):  # the rows `indices` of each sentence's beams
        while indices.dim() < tensor.dim():
            indices = indices.unsqueeze(-1)
        return torch.take_along_dim(tensor, indices, dim=1)

    # Outputs are padded as transformers pads them (its pad id, or `</s>` when that id is 0).
    fill = (config.pad_token_id or eos[0]) if eos else -1
    running_sequences = torch.full((batch_size, num_beams, max_length), fill, dtype=torch.int64, device=device)
    running_sequences[:, :, :cur_len] = unflatten(input_ids, num_beams)
    sequences = running_sequences.detach().clone()
    # Only the first beam starts alive, so that the beams do not all pick the same tokens.
    running_scores = torch.zeros((batch_size, num_beams), dtype=torch.float, device=device)
    running_scores[:, 1:] = -1e9
    beam_scores = torch.full((batch_size, num_beams), -1e9, dtype=torch.float, device=device)
    is_sent_finished = torch.zeros((batch_size, num_beams), dtype=torch.bool, device=device)
    improvable = torch.ones((batch_size, 1), dtype=torch.bool, device=device)
    running_beam_indices = torch.full(
        (batch_size, num_beams, max_length - cur_len), -1, dtype=torch.int32, device=device
    )
    beam_indices = running_beam_indices.detach().clone()

    flat_running = input_ids
    first = True
    while True:
        # a. The next token's scores. The first step feeds the whole target so far (or, continuing from a cache that
        # holds a prefix of it, the rest), later steps the last token (all of them without a cache).
        if first:
            step_ids = flat_running
            if cache is not None and target_mask is not None and target_mask.shape[1] == step_ids.shape[1]:
                step_ids = step_ids[:, cache.get_seq_length() :]
        else:
            flat_running = flatten(running_sequences[:, :, :cur_len])
            step_ids = flat_running[:, -1:] if use_cache else flat_running
        first = False
        step_inputs = dict(model_kwargs, decoder_input_ids=step_ids.clone(), cache=cache, use_cache=use_cache)
        if target_mask is not None:
            step_inputs["decoder_attention_mask"] = target_mask
        outputs = model(**step_inputs, return_dict=True)
        if (returned := cache_of(outputs)) is not None:
            cache = returned
        if target_mask is not None:
            target_mask = torch.cat([target_mask, target_mask.new_ones((target_mask.shape[0], 1))], dim=-1)
        logits = outputs.logits[:, -1, :].to(copy=True, dtype=torch.float32, device=device)
        log_probs = logits_processor(flat_running, nn.functional.log_softmax(logits, dim=-1))
        if raw_logits is not None:
            raw_logits += (logits.clone(),)
        if all_scores is not None:
            all_scores += (log_probs.clone(),)
        if decoder_attentions is not None:
            decoder_attentions += (outputs.decoder_attentions,)
            cross_attentions += (outputs.cross_attentions,)
        if decoder_hidden_states is not None:
            decoder_hidden_states += (outputs.decoder_hidden_states,)
        del outputs

        # b. The top 2 x beam continuations of each sentence by log-probability (sampled, with `do_sample`).
        log_probs = (unflatten(log_probs, num_beams) + running_scores[:, :, None]).reshape(batch_size, -1)
        if config.do_sample:
            topk_indices = torch.multinomial(nn.functional.softmax(log_probs, dim=-1), num_samples=keep)
            topk_log_probs = torch.gather(input=log_probs, dim=1, index=topk_indices)
            topk_log_probs, order = topk_log_probs.sort(dim=-1, descending=True)
            topk_indices = topk_indices.gather(dim=-1, index=order)
        else:
            topk_log_probs, topk_indices = torch.topk(log_probs, k=keep)
        vocab_size = log_probs.shape[-1] // num_beams
        topk_beams = topk_indices // vocab_size
        topk_running_beam_indices = gather(running_beam_indices, topk_beams)
        topk_running_sequences = gather(running_sequences, topk_beams)
        topk_running_sequences[:, :, cur_len] = topk_indices % vocab_size
        batch_offset = torch.arange(batch_size, device=device).view(-1, 1) * num_beams
        topk_running_beam_indices[:, :, cur_len - prompt_len] = topk_beams + batch_offset

        # c. Which candidates end here (`</s>`, or the maximum length).
        ended = stopping_criteria(flatten(topk_running_sequences[:, :, : cur_len + 1]), all_scores)
        ended = unflatten(ended, keep)

        # d. The best `num_beams` candidates that have not ended run on.
        topk_running_log_probs = topk_log_probs + ended.to(torch.float32) * -1.0e9
        next_indices = torch.topk(topk_running_log_probs, k=num_beams)[1]
        running_sequences = gather(topk_running_sequences, next_indices)
        running_scores = gather(topk_running_log_probs, next_indices)
        running_beam_indices = gather(topk_running_beam_indices, next_indices)

        # e. Every candidate that ended enters the finished set with its GNMT score; the set keeps the best `num_beams`
        # (none enter once it is full under early stopping, or once no improvement is possible).
        candidate_scores = topk_log_probs / gnmt_length_penalty(cur_len + 1 - prompt_len, alpha)
        full = torch.all(is_sent_finished, axis=-1, keepdims=True) & (early_stopping is True)
        candidate_scores += full.to(torch.float32) * -1.0e9
        candidate_scores += (~improvable).to(torch.float32) * -1.0e9
        candidate_scores += (~ended) * -1.0e9
        merged_scores = torch.cat((beam_scores, candidate_scores), dim=1)
        best = torch.topk(merged_scores, k=num_beams)[1]
        sequences = gather(torch.cat((sequences, topk_running_sequences), dim=1), best)
        beam_scores = gather(merged_scores, best)
        beam_indices = gather(torch.cat((beam_indices, topk_running_beam_indices), dim=1), best)
        is_sent_finished = gather(torch.cat((is_sent_finished, ended), dim=1), best)

        # f. The cache follows the beams that run on.
        if cache is not None:
            cache.reorder_cache(flatten(running_beam_indices[..., cur_len - prompt_len]))
        cur_len += 1

        # g. Can a running hypothesis still beat the worst finished one? Its best reachable score (above).
        never = early_stopping == "never" and alpha > 0
        best_length = (max_length if never else cur_len) - prompt_len
        best_running = (running_scores / gnmt_length_penalty(best_length, alpha))[:, :1]
        worst_finished = torch.where(is_sent_finished, torch.min(beam_scores, dim=1, keepdim=True)[0], -1.0e9)
        improvable = improvable & torch.any(best_running > worst_finished, dim=-1, keepdim=True)
        open_beams = ~(torch.all(is_sent_finished) & (early_stopping is True))
        if not bool(torch.any(improvable) & open_beams & ~torch.all(ended)):
            break

    # The best `num_return_sequences` of each sentence, cut to the longest one.
    num_return = config.num_return_sequences
    sequences = flatten(sequences[:, :num_return, :])
    beam_scores = flatten(beam_scores[:, :num_return])
    beam_indices = flatten(beam_indices[:, :num_return, :])
    generated = ((beam_indices + 1).bool()).sum(dim=1).max()
    sequences = sequences[:, : prompt_len + generated]
    beam_indices = beam_indices[:, :generated]
    if not return_dict:
        return sequences
    return with_cache(
        GenerateBeamEncoderDecoderOutput,
        cache,
        sequences=sequences,
        sequences_scores=beam_scores if config.output_scores else None,
        scores=all_scores,
        logits=raw_logits,
        beam_indices=beam_indices,
        encoder_attentions=encoder_outputs.get("attentions") if config.output_attentions else None,
        encoder_hidden_states=encoder_outputs.get("hidden_states") if config.output_hidden_states else None,
        decoder_attentions=decoder_attentions,
        cross_attentions=cross_attentions,
        decoder_hidden_states=decoder_hidden_states,
    )


__all__ = ["CACHE_NAME", "SourceLengthLimit", "cache_of", "gnmt_beam_search", "takes_cache", "with_cache"]
