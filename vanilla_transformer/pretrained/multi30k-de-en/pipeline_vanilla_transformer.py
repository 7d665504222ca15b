"""`pipeline("translation", ...)` for this model, as remote code.

transformers 5 removed its built-in "translation" (and "text2text-generation") pipelines. A model
repository can still provide one: `config.json` names it under `custom_pipelines` (the dict
`CUSTOM_PIPELINES` below) and the repository holds this file, so that

    pipeline("translation", model="<checkpoint dir or Hub id>", trust_remote_code=True)

loads the model with `AutoModelForSeq2SeqLM`, its tokenizer with `AutoTokenizer`, and this class
from the repository. `pipeline()` reads `config.custom_pipelines` *before* it rejects the removed
task name, which is why the literal name "translation" works.

This file is copied into every saved checkpoint, where this package may not be installed: it
imports only torch and transformers. It also holds `fit_source`, the one rule for an input longer than the model
takes, which `translate`, the CTranslate2 engine and the web demo import from here.

With a model in memory, build the pipeline directly, `TranslationPipeline(model=model,
tokenizer=tokenizer)`, or name the class: `pipeline("translation", model=model,
config=model.config, tokenizer=tokenizer, pipeline_class=TranslationPipeline)`.
"""

import torch
from transformers import Pipeline
from transformers.utils import logging


logger = logging.get_logger(__name__)

# What `config.custom_pipelines` must hold (the shape `pipeline()` reads in transformers 5.17 to 5.24:
# `clean_custom_task` needs "impl", a "module.Class" path inside the repository, and "pt", names of
# transformers Auto classes used to load the model; "type" is informative; there is no "tf" any more).
CUSTOM_PIPELINES = {
    "translation": {
        "impl": "pipeline_vanilla_transformer.TranslationPipeline",
        "pt": ["AutoModelForSeq2SeqLM"],
        "type": "text",
    }
}


def fit_source(ids, limit: int | None, *, subject: str = "The source", truncate: bool = True) -> tuple[list, str]:
    """The one rule for a source longer than the model takes, for this pipeline, `translate`, the CTranslate2 engine
    and the web demo alike: (ids, message), `limit` the config's `input_length_limit` (None: no limit).

    A source of at most `limit` tokens is returned as it is, with message "". A longer one is truncated to its first
    `limit - 1` tokens and its last one (`</s>`, as the tokenizer's own truncation keeps it), and the message says
    so, naming the source by `subject` ("Line 3", "The text"); with `truncate=False` that message is a ValueError
    instead. Here, in remote code, because the pipeline applies it where this package is not installed.
    """
    ids = list(ids)
    if limit is None or len(ids) <= limit:
        return ids, ""
    said = f"{subject} has {len(ids)} tokens (</s> included) but the model takes at most {limit}"
    if not truncate:
        raise ValueError(f"{said}: pass a shorter one.")
    return ids[: limit - 1] + ids[-1:], f"{said}: it is truncated to its first {limit} tokens."


class TranslationPipeline(Pipeline):
    """Translate text with an encoder-decoder model: text -> tokenizer -> `model.generate` -> text.

    Call it with a string (returns `[{"translation_text": ...}]`) or a list of strings (returns
    one such dict per input, or one list of `num_return_sequences` dicts per input when more than
    one sequence is asked for). Keyword arguments of `generate()` (`num_beams`, `max_new_tokens`,
    `length_penalty`, `num_return_sequences`, ...) may be given when the pipeline is built or at
    each call; anything not set falls back to the model's `generation_config` and `generate` (for
    this model: its beam size and length penalty, at most source length + 50 tokens). `batch_size=n`
    translates n sentences at a time, padded with the tokenizer's pad id (the attention mask hides
    the padding, so results equal one-by-one translation).

    Pipeline arguments:
        truncation: cut inputs longer than `max_input_length` (default True), by the rule `translate` and the
            demo cut them with (`fit_source`: the first tokens and `</s>`, with a warning).
        max_input_length: longest input in tokens, `</s>` included; default the config's
            `input_length_limit(tokenizer)` (configuration_vanilla_transformer.py): the smaller of the tokenizer's
            `model_max_length` and the model's `max_position_embeddings`; none for a config without that rule.
        return_tensors: return `{"translation_token_ids": tensor}` instead of text.
        clean_up_tokenization_spaces: passed to `tokenizer.decode` (default: the tokenizer's).
    """

    # The generation keywords (at construction and at each call) reach `_forward` through `_sanitize_parameters`, as
    # every other pipeline parameter does, so that they go to `generate` as given, on every transformers release.
    _load_tokenizer = True
    _load_processor = False
    _load_image_processor = False
    _load_feature_extractor = False
    _load_video_processor = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if not self.model.can_generate():
            raise ValueError(
                f"`model` ({type(self.model).__name__}) cannot generate: TranslationPipeline needs an "
                "encoder-decoder model with a language-model head, e.g. AutoModelForSeq2SeqLM."
            )
        if self.tokenizer is None:
            raise ValueError("`tokenizer` is None: pass the tokenizer the model was trained with.")

    def _sanitize_parameters(
        self,
        truncation=None,
        max_input_length=None,
        return_tensors=None,
        clean_up_tokenization_spaces=None,
        **generate_kwargs,
    ):
        preprocess_params = {}
        if truncation is not None:
            preprocess_params["truncation"] = truncation
        if max_input_length is not None:
            if not isinstance(max_input_length, int) or max_input_length < 1:
                raise ValueError(f"`max_input_length` must be a positive integer (tokens), got {max_input_length!r}.")
            preprocess_params["max_input_length"] = max_input_length
        postprocess_params = {}
        if return_tensors is not None:
            postprocess_params["return_tensors"] = return_tensors
        if clean_up_tokenization_spaces is not None:
            postprocess_params["clean_up_tokenization_spaces"] = clean_up_tokenization_spaces
        # Everything else is for generate(); it rejects what it does not know.
        return preprocess_params, generate_kwargs, postprocess_params

    def preprocess(self, text, truncation=True, max_input_length=None):
        if not isinstance(text, str):
            raise ValueError(
                f"TranslationPipeline translates strings, got {type(text).__name__} ({text!r:.60}): pass a "
                "string or a list of strings."
            )
        # The config's limit: this file imports nothing from the package (it is remote code), the config carries it
        # (a config without that rule, another model's, sets none). A longer input: the one rule, `fit_source`.
        rule = getattr(self.model.config, "input_length_limit", None)
        max_length = max_input_length or (rule(self.tokenizer) if rule is not None else None)
        # Without its outer whitespace, as the model was trained (`vanilla-transformer train` strips every
        # sentence): the tokenizer keeps spaces, so " A man" would start with a lone "▁" token the model never saw.
        ids = self.tokenizer(text.strip(), return_attention_mask=False, return_token_type_ids=False, verbose=False)
        ids, message = fit_source(ids["input_ids"], max_length if truncation else None, subject="The input")
        if message:
            logger.warning(message)
        input_ids = torch.tensor([ids])
        return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}

    def _forward(self, model_inputs, **generate_kwargs):
        input_ids = model_inputs["input_ids"]
        in_batch = input_ids.shape[0]
        # The call's and the pipeline's generation kwargs (`Pipeline` merges them); the rest comes from the model's
        # generation config. No length is added: without one, the model's `generate` stops each sentence at its
        # source length + 50 (section 6.1), which a batch-wide `max_new_tokens` set here would override.
        output_ids = self.model.generate(
            input_ids=input_ids, attention_mask=model_inputs["attention_mask"], **generate_kwargs
        )
        if not isinstance(output_ids, torch.Tensor):  # return_dict_in_generate=True
            output_ids = output_ids.sequences
        # [batch * num_return_sequences, length] -> [batch, num_return_sequences, length], so that the
        # pipeline's un-batching hands each input its own sequences.
        output_ids = output_ids.reshape(in_batch, output_ids.shape[0] // in_batch, *output_ids.shape[1:])
        return {"output_ids": output_ids}

    def postprocess(self, model_outputs, return_tensors=False, clean_up_tokenization_spaces=None):
        records = []
        for output_ids in model_outputs["output_ids"][0]:
            if return_tensors:
                records.append({"translation_token_ids": output_ids})
            else:
                text = self.tokenizer.decode(
                    output_ids,
                    skip_special_tokens=True,
                    clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                )
                records.append({"translation_text": text})
        return records

    def __call__(self, inputs, *args, **kwargs):
        """Translate `inputs` (a string or a list of strings); see the class docstring."""
        if isinstance(inputs, str):
            return super().__call__(inputs, *args, **kwargs)
        if isinstance(inputs, (list, tuple)):
            if not inputs:
                return []
            result = super().__call__(list(inputs), *args, **kwargs)
            # As transformers 4's translation pipeline: one dict per input when one sequence is asked for.
            if all(len(records) == 1 for records in result):
                return [records[0] for records in result]
            return result
        # Datasets and generators stream through unchanged (an iterator of lists of dicts).
        return super().__call__(inputs, *args, **kwargs)


__all__ = ["CUSTOM_PIPELINES", "TranslationPipeline", "fit_source"]
