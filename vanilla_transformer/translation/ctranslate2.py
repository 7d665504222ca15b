"""Export a trained model to CTranslate2 (`export_ctranslate2`), and translate with the export
(`translate_ctranslate2`, `CTranslate2Model`): the same tokens as `generate`, faster on a CPU.

CTranslate2's converters do not know this model, so it is written through CTranslate2's specification API: the
layers of section 3.1, the shared embedding of section 3.4 (stored once), and the sinusoids of section 3.5 as an
explicit table (CTranslate2's built-in one orders sines and cosines otherwise). Beam search matches `generate`'s
per-sentence length limit (section 6.1: source length + 50) by decoding sentences of one source length together;
the GNMT length penalty has no CTranslate2 counterpart and is refused. docs/sharing.md ("Serving with CTranslate2")
says how each part matches `generate`; docs/performance.md gives the speed. Needs the `ct2` extra.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..generation_vanilla_transformer import check_decoding, length_penalty_divisor, length_penalty_form


logger = logging.getLogger(__name__)

SETTINGS_FILE = "vanilla_transformer_ct2.json"
TOKENIZER_FILE = "tokenizer.json"
QUANTIZATIONS = ("float32", "int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16")
ACTIVATIONS = {"relu": "RELU", "gelu": "GELU", "gelu_new": "GELUTanh", "silu": "SWISH", "swish": "SWISH"}
INSTALL_HINT = (
    "install the `ct2` extra: pip install '.[ct2]' in the vanilla-transformer clone (or pip install ctranslate2)"
)


def import_ctranslate2():
    """`import ctranslate2`, binding it to its own OpenMP runtime even when torch was imported first.

    The ctranslate2 wheel links its own libgomp; torch loads its libgomp with global symbols. Loaded after torch,
    CTranslate2's OpenMP calls resolve to torch's runtime, and both engines run slower. `RTLD_DEEPBIND`
    makes the extension resolve its symbols in its own dependencies first, as when it is imported before torch.
    """
    if "ctranslate2" in sys.modules:
        return sys.modules["ctranslate2"]
    flags = sys.getdlopenflags()
    deepbind = getattr(os, "RTLD_DEEPBIND", 0)
    if "torch" in sys.modules and deepbind:
        sys.setdlopenflags(flags | deepbind)
    try:
        import ctranslate2
    except ImportError as error:
        raise ImportError(f"CTranslate2 is not installed ({error}): {INSTALL_HINT}.") from None
    finally:
        sys.setdlopenflags(flags)
    return ctranslate2


# ------------------------------------------------------------------------------------------------ export


def position_table(config, length: int):
    """The position encodings the model adds to its embeddings for positions 0 .. length-1, float32 numpy."""
    import torch

    from ..modeling_vanilla_transformer import sinusoidal_position_encoding

    return sinusoidal_position_encoding(torch.arange(length), config.d_model).numpy()


def build_spec(model, table_length: int):
    """The `ctranslate2.specs.TransformerSpec` of `model` (a VanillaTransformerForConditionalGeneration), weights set.

    `table_length`: rows of the sinusoidal position table (ignored for learned positions, whose table is copied).
    """
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    if config.activation_function not in ACTIVATIONS:
        raise ValueError(
            f"config.activation_function={config.activation_function!r} has no CTranslate2 equivalent: export a "
            f"model with one of {sorted(ACTIVATIONS)} (the paper's is 'relu')."
        )
    for name in ("qk_head_dim", "v_head_dim"):
        value = getattr(config, name, None)
        heads = {config.encoder_attention_heads, config.decoder_attention_heads}
        if value is not None and any(value * h != config.d_model for h in heads):
            raise ValueError(
                f"config.{name}={value}: CTranslate2's Transformer has heads of d_model / h (here "
                f"{', '.join(str(config.d_model // h) for h in sorted(heads))}) for queries, keys and values alike; "
                "translate this model with --engine transformers."
            )
    activation = getattr(common_spec.Activation, ACTIVATIONS[config.activation_function])
    # Post-norm (section 3.1) is pre_norm=False: CTranslate2 then normalises after each residual addition and the
    # stacks have no final norm; pre-norm has one after each stack, as the model's `normalize_before` variant.
    encoder_spec = transformer_spec.TransformerEncoderSpec(
        config.encoder_layers, config.encoder_attention_heads, pre_norm=config.normalize_before, activation=activation
    )
    decoder_spec = transformer_spec.TransformerDecoderSpec(
        config.decoder_layers, config.decoder_attention_heads, pre_norm=config.normalize_before, activation=activation
    )
    spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)
    positions = None
    if config.position_embedding_type == "sinusoidal":
        positions = position_table(config, table_length)
    scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    stacks = ((encoder_spec, model.model.encoder), (decoder_spec, model.model.decoder))
    for stack_spec, stack in stacks:
        stack_spec.scale_embeddings = scale  # section 3.4: embeddings x sqrt(d_model)
        stack_spec.position_encodings.encodings = (
            positions if stack.embed_positions is None else _weight(stack.embed_positions.weight)
        )
        if config.normalize_before:
            _layer_norm(stack_spec.layer_norm, stack.layer_norm)
    # Section 3.4: one matrix for the encoder input, the decoder input and the pre-softmax projection when tied
    # (`tie_word_embeddings`, the default); CTranslate2 stores equal weights once.
    encoder_spec.embeddings[0].weight = _weight(model.model.encoder.embed_tokens.weight)
    decoder_spec.embeddings.weight = _weight(model.model.decoder.embed_tokens.weight)
    _linear(decoder_spec.projection, model.get_output_embeddings())
    _set_layers(encoder_spec, decoder_spec, model)

    eps = {m.eps for m in model.modules() if m.__class__.__name__ == "LayerNorm"}
    if len(eps) != 1:
        raise ValueError(f"the model's LayerNorms have different epsilons {sorted(eps)}; CTranslate2 takes one.")
    spec.config.layer_norm_epsilon = eps.pop()
    return spec


def _set_layers(encoder_spec, decoder_spec, model) -> None:
    """The weights of every encoder layer (self-attention, FFN, section 3.1) and decoder layer (self-attention,
    encoder-decoder attention, FFN), each sub-layer with its LayerNorm, into the specs."""
    for layer_spec, layer in zip(encoder_spec.layer, model.model.encoder.layers):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _layer_norm(layer_spec.ffn.layer_norm, layer.final_layer_norm)
    for layer_spec, layer in zip(decoder_spec.layer, model.model.decoder.layers):
        _attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        _layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_layer_norm)
        _attention(layer_spec.attention, layer.encoder_attn, self_attention=False)
        _layer_norm(layer_spec.attention.layer_norm, layer.encoder_attn_layer_norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _layer_norm(layer_spec.ffn.layer_norm, layer.final_layer_norm)


def _weight(tensor):
    """A float32 numpy copy of `tensor`, on the CPU."""
    return tensor.detach().to("cpu", copy=True).float().numpy()


def _linear(linear_spec, module) -> None:
    linear_spec.weight = _weight(module.weight)
    if module.bias is not None:  # no bias (attention_bias=False) stays CTranslate2's OPTIONAL: none is applied
        linear_spec.bias = _weight(module.bias)


def _layer_norm(norm_spec, module) -> None:
    norm_spec.gamma = _weight(module.weight)
    norm_spec.beta = _weight(module.bias)


def _attention(attention_spec, module, self_attention: bool) -> None:
    """W_Q, W_K, W_V (fused as CTranslate2 stores them) and W_O of one multi-head attention (section 3.2.2)."""
    from ctranslate2.converters.utils import fuse_linear
    from ctranslate2.specs import common_spec

    q, k, v = (common_spec.LinearSpec() for _ in range(3))
    _linear(q, module.q_proj)
    _linear(k, module.k_proj)
    _linear(v, module.v_proj)
    if self_attention:  # one fused [W_Q; W_K; W_V] projection
        fuse_linear(attention_spec.linear[0], [q, k, v])
    else:  # queries from the decoder, keys and values from the encoder output
        fuse_linear(attention_spec.linear[0], [q])
        fuse_linear(attention_spec.linear[1], [k, v])
    _linear(attention_spec.linear[-1], module.out_proj)


def _generation_settings(generation, tokenizer, source_limit: int, table_length: int) -> dict:
    """What `translate_ctranslate2` needs to decode as `generate` does with the generation config `generation`."""
    form = length_penalty_form(generation)
    if form != "length" and (generation.num_beams or 1) > 1:
        raise ValueError(
            f"the model decodes with the {form} length penalty (generation_config.length_penalty_form={form!r}), "
            "which CTranslate2 does not have (it divides by length ** alpha): export with --length_penalty_form "
            "length (and --length_penalty ALPHA) to decode with that form, or translate with --engine transformers."
        )
    early_stopping = getattr(generation, "early_stopping", True)
    if (generation.num_beams or 1) > 1 and early_stopping is not True:
        raise ValueError(
            f"generation_config.early_stopping={early_stopping!r}: CTranslate2's beam search stops a sentence once "
            f"`num_beams` hypotheses are finished, which is generate's early_stopping=True (the model's default). "
            f"Set model.generation_config.early_stopping = True before exporting."
        )
    if generation.max_new_tokens is not None or getattr(generation, "source_length_offset", None) is None:
        raise ValueError(
            "the generation config sets no `source_length_offset` (or sets `max_new_tokens`): the export reproduces "
            "the model's rule 'at most source length + source_length_offset tokens' (section 6.1). Restore "
            "generation_config.source_length_offset (50) and max_new_tokens=None, or pass --max_new_tokens when "
            "translating."
        )
    return {
        "format": 1,
        "num_beams": int(generation.num_beams or 1),
        "length_penalty": float(generation.length_penalty if generation.length_penalty is not None else 1.0),
        "length_penalty_form": "length",
        "early_stopping": True,
        "source_length_offset": int(generation.source_length_offset),
        "source_limit": int(source_limit),
        "position_table_length": int(table_length),
        "eos_token": tokenizer.eos_token,
    }


def export_ctranslate2(
    model,
    output_dir,
    *,
    quantization: str = "float32",
    tokenizer=None,
    force: bool = False,
    revision: str | None = None,
    trust_remote_code: bool = False,
    decoding: dict | None = None,
) -> Path:
    """Write `model` (a checkpoint directory, a Hub repo id, or a loaded model with `tokenizer`) to `output_dir` as a
    CTranslate2 model, with its tokenizer and generation settings. Returns the output directory.

    `quantization`: the weight type CTranslate2 stores (`float32`, `int8`, `int8_float32`, `bfloat16`, ...; the
    compute type is chosen when loading, see `translate_ctranslate2`). The directory is written beside its final
    place and moved there when complete; an existing one that is not empty is an error unless `force`.
    `decoding`: generation options written instead of the model's (`num_beams`, `length_penalty`,
    `length_penalty_form`: `export ctranslate2 --num_beams --length_penalty --length_penalty_form`).
    CTranslate2 has the length ** alpha penalty only: a model whose generation config has the GNMT form is refused
    (ValueError) unless `decoding` sets `length_penalty_form="length"`.
    """
    import_ctranslate2()
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization={quantization!r} is not one of {list(QUANTIZATIONS)}.")
    output_dir = Path(output_dir)
    if not force and output_dir.exists() and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise ValueError(
            f"output directory {str(output_dir)!r} exists and is not empty: choose another one or pass force=True "
            f"to replace it."
        )
    if isinstance(model, (str, os.PathLike)):
        from .loading import load_model

        model, tokenizer = load_model(str(model), revision=revision, device="cpu", trust_remote_code=trust_remote_code)
    elif tokenizer is None:
        raise ValueError("`tokenizer` is needed when `model` is a model object: pass the one it was trained with.")
    from ..data.tokenizer import check_tokenizer_fits_model

    check_tokenizer_fits_model(tokenizer, model.config)
    limit = model.config.input_length_limit(tokenizer)  # the longest source `translate` gives the model
    if model.config.position_embedding_type == "learned":
        table_length = model.config.max_position_embeddings  # outputs stop there: the model has no position beyond
    else:
        table_length = limit + (getattr(model.generation_config, "source_length_offset", None) or 0)
    generation = copy.deepcopy(model.generation_config)
    for name, value in (decoding or {}).items():  # the export's decoding options, over the model's
        setattr(generation, name, value)
    settings = _generation_settings(generation, tokenizer, limit, table_length)
    model.eval()
    vocabulary = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    if len(set(vocabulary)) != len(vocabulary):
        raise ValueError("the tokenizer maps two ids to the same token string; CTranslate2 looks tokens up by string.")

    _write(model, tokenizer, vocabulary, table_length, settings, output_dir, quantization)
    logger.info("Exported %s to %s (%s).", type(model).__name__, output_dir, quantization)
    return output_dir


def _write(model, tokenizer, vocabulary, table_length: int, settings: dict, output_dir: Path, quantization: str):
    """The CTranslate2 model, the tokenizer and the settings, written beside `output_dir` and moved there whole."""
    from ctranslate2.converters import Converter

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{output_dir.name}.", dir=output_dir.parent))
    try:
        tokenizer_dir = staging / "tokenizer"
        tokenizer.save_pretrained(tokenizer_dir)
        (staging / SETTINGS_FILE).write_text(json.dumps(settings, indent=2) + "\n", encoding="utf-8")

        class _Converter(Converter):
            def _load(self):
                spec = build_spec(model, table_length)
                spec.register_source_vocabulary(vocabulary)
                spec.register_target_vocabulary(vocabulary)
                spec.config.unk_token = tokenizer.unk_token
                spec.config.bos_token = tokenizer.bos_token
                spec.config.eos_token = tokenizer.eos_token
                # The first decoder input is the start token (section 3: outputs "shifted right").
                spec.config.decoder_start_token = vocabulary[model.config.decoder_start_token_id]
                spec.register_file(str(tokenizer_dir / TOKENIZER_FILE))
                spec.register_file(str(staging / SETTINGS_FILE))
                return spec

        target = staging / "model"
        _Converter().convert(str(target), quantization=quantization)
        if output_dir.is_dir():
            shutil.rmtree(output_dir)
        elif output_dir.exists():
            output_dir.unlink()
        os.replace(target, output_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ translate


class _Outputs:
    """The translations (token ids, without the final </s>) and scores of one `CTranslate2Model.generate` call, in
    input order, and its progress bar (a tqdm bar or None)."""

    def __init__(self, token_to_id, eos_id: int, count: int, progress):
        self.token_to_id, self.eos_id, self.progress = token_to_id, eos_id, progress
        self.results, self.scores = [None] * count, [None] * count

    def finish(self, i: int, hypothesis: list[str], score) -> None:
        ids = [self.token_to_id(t) for t in hypothesis]
        self.results[i], self.scores[i] = ids[:-1] if ids and ids[-1] == self.eos_id else ids, score

    def done(self, n: int) -> None:
        if self.progress is not None:
            self.progress.update(n)


class CTranslate2Model:
    """An exported model loaded for translation: the CTranslate2 translator, the tokenizer, the decoding settings.

    `device` "cpu" or "cuda"; `compute_type` "default" (the stored weight type), "float32", "int8", "bfloat16", ...;
    `intra_threads` threads per translation (0: CTranslate2's default, 4 or the number of cores if fewer).
    """

    def __init__(self, path, *, device: str = "cpu", compute_type: str = "default", intra_threads: int = 0):
        ct2 = import_ctranslate2()
        from tokenizers import Tokenizer

        path = Path(path)
        settings_file = path / SETTINGS_FILE
        if not settings_file.is_file() or not (path / TOKENIZER_FILE).is_file():
            raise ValueError(
                f"--model {str(path)!r} is not a CTranslate2 export of this package (no {SETTINGS_FILE} / "
                f"{TOKENIZER_FILE}): write one with `vanilla-transformer export ctranslate2 MODEL {path}`."
            )
        self.settings = json.loads(settings_file.read_text(encoding="utf-8"))
        form = self.settings.get("length_penalty_form", "length")
        if form != "length":  # never written by this package's export: CTranslate2 has no other form
            raise ValueError(f"{str(path)!r} asks for the {form} length penalty, which CTranslate2 does not have.")
        self.tokenizer = Tokenizer.from_file(str(path / TOKENIZER_FILE))
        self.tokenizer.no_truncation()  # lengths are handled by translate_ctranslate2, as by `translate`
        self.tokenizer.no_padding()
        try:
            self.translator = ct2.Translator(
                str(path), device=device, compute_type=compute_type, intra_threads=intra_threads
            )
        except (RuntimeError, ValueError) as error:
            raise ValueError(
                f"CTranslate2 could not load {str(path)!r} on {device} as {compute_type}: {error}"
            ) from None
        self.eos_token = self.settings["eos_token"]
        self.eos_id = self.tokenizer.token_to_id(self.eos_token)
        self.tokens = [self.tokenizer.id_to_token(i) for i in range(self.tokenizer.get_vocab_size())]

    def encode(self, sentences: Sequence[str]) -> list[list[int]]:
        return [encoding.ids for encoding in self.tokenizer.encode_batch(list(sentences))]

    def decode(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return self.tokenizer.decode_batch([list(row) for row in ids], skip_special_tokens=True)

    def generate(
        self,
        sources: Sequence[Sequence[int]],
        *,
        num_beams: int | None = None,
        max_new_tokens: int | None = None,
        batch_size: int = 32,
        return_scores: bool = False,
        progress=None,
        length_penalty: float | None = None,
    ):
        """The token ids `generate` gives for each source (a list of token ids ending in `</s>`), in input order,
        without the start token and the final `</s>`; with `return_scores`, also each translation's score as
        `generate`'s `sequences_scores` (sum of log-probabilities / length ** length_penalty, `</s>` counted; None
        for greedy search). `progress`: a tqdm bar to update, or None. `length_penalty`: alpha instead of the
        exported one (CTranslate2's length ** alpha form)."""
        beams = self.settings["num_beams"] if num_beams is None else num_beams
        lp = self.settings["length_penalty"] if length_penalty is None else float(length_penalty)
        self._check_request(sources, beams, max_new_tokens, batch_size, lp)
        out = _Outputs(self.tokenizer.token_to_id, self.eos_id, len(sources), progress)
        order = sorted(range(len(sources)), key=lambda i: -len(sources[i]))  # longest first, as `translate`
        if max_new_tokens is not None or beams == 1:
            self._decode_mixed_lengths(sources, order, out, beams, max_new_tokens, batch_size, lp)
        else:
            self._decode_by_length(sources, order, out, beams, batch_size, lp)
        return (out.results, out.scores) if return_scores else out.results

    def _check_request(self, sources, beams: int, max_new_tokens: int | None, batch_size: int, lp: float) -> None:
        """The decoding options and the sources, refused (ValueError) where the export cannot decode them."""
        from ..pipeline_vanilla_transformer import fit_source  # the rule `translate` truncates by

        check_decoding(batch_size=batch_size, num_beams=beams, max_new_tokens=max_new_tokens, length_penalty=lp)
        table = self.settings["position_table_length"]
        if max_new_tokens is not None and max_new_tokens > table:
            raise ValueError(
                f"max_new_tokens must be in [1, {table}] (the exported position table has {table} rows), "
                f"got {max_new_tokens}."
            )
        for ids in sources:
            if not ids:
                raise ValueError("a source has no tokens; the export takes 1 or more (its </s> at least).")
            fit_source(ids, self.settings["source_limit"], subject="A source", truncate=False)

    def _limit(self, source) -> int:
        """The tokens `generate` may give `source`, its forced </s> included (capped by a learned table)."""
        return min(len(source) + self.settings["source_length_offset"], self.settings["position_table_length"])

    def _decode_mixed_lengths(self, sources, order, out, beams, max_new_tokens, batch_size, lp: float) -> None:
        """Batches of mixed lengths. With max_new_tokens, generate has one limit for all, as CTranslate2. Greedy
        tokens do not depend on the limit: each output is cut where generate forces </s> (limit - 1 tokens)."""
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            longest = max_new_tokens or max(self._limit(sources[i]) for i in chunk) - 1
            for i, hyps in zip(chunk, self._search(sources, chunk, beams, max(longest, 1), lp=lp)):
                tokens, score = hyps[0]
                if max_new_tokens is None:
                    limit = self._limit(sources[i])
                    tokens, score = (tokens[: limit - 1] if limit > 1 else [self.eos_token]), None
                out.finish(i, tokens, score)
            out.done(len(chunk))

    def _decode_by_length(self, sources, order, out, beams, batch_size, lp: float) -> None:
        """Beam search with generate's per-sentence limit: sentences of one source length per call, so that one
        max_decoding_length (limit - 1, one short of the forced </s>) is each sentence's own."""
        groups = {}
        for i in order:
            groups.setdefault(self._limit(sources[i]), []).append(i)
        again = []
        for length, group in groups.items():
            for start in range(0, len(group), batch_size):
                chunk = group[start : start + batch_size]
                if length == 1:  # nothing but the forced </s>
                    hyps = [[([self.eos_token], 0.0)] for _ in chunk]
                else:
                    hyps = self._search(sources, chunk, beams, length - 1, hypotheses=beams, lp=lp)
                for i, best in zip(chunk, hyps):
                    # A search that stopped before the last step returns no hypothesis of the last step's length
                    # (it would be among the best `beams`: fewer than `beams` finished before it).
                    if all(len(h) < length - 1 for h, _ in best):
                        out.finish(i, *best[0])
                        continue
                    pick = self._pick_as_generate(best, beams, length, complete=False, lp=lp)
                    if pick is None:
                        again.append(i)
                    else:
                        out.finish(i, *pick)
                out.done(len(chunk) - sum(i in again for i in chunk))
        # Where the best `beams` do not decide: the same search again with patience=2, which changes nothing before
        # the last step (the stopping rule, `beams` finished, had not fired) and returns every finished hypothesis
        # (at most 2 * beams - 1).
        for length in groups:
            redo = [i for i in again if self._limit(sources[i]) == length]
            for start in range(0, len(redo), batch_size):
                chunk = redo[start : start + batch_size]
                hyps = self._search(sources, chunk, beams, length - 1, patience=2.0, hypotheses=2 * beams, lp=lp)
                for i, finished in zip(chunk, hyps):
                    out.finish(i, *self._pick_as_generate(finished, beams, length, complete=True, lp=lp))
                out.done(len(chunk))

    def _search(self, sources, indices, beams, max_length, patience=1.0, hypotheses=1, *, lp: float):
        """CTranslate2's search on `sources[i] for i in indices`: for each, [(tokens, score)], best first."""
        out = self.translator.translate_batch(
            [[self.tokens[t] for t in sources[i]] for i in indices],
            beam_size=beams,
            patience=patience,
            num_hypotheses=hypotheses,
            # CTranslate2 stops a sentence as soon as its best beam ends when there is no length penalty, which
            # `generate` does not do; a penalty too small to change a score (len ** 1e-30 == 1.0) keeps the rule
            # "stop when `beams` hypotheses are finished".
            length_penalty=lp if lp != 0 else 1e-30,
            max_decoding_length=max_length,
            min_decoding_length=0,
            max_input_length=0,  # sources are checked above
            return_end_token=True,  # </s> counts in the length that the penalty divides by, as in `generate`
            return_scores=True,
            end_token=self.eos_token,
        )
        return [list(zip(r.hypotheses, r.scores)) for r in out]

    def _pick_as_generate(self, hyps, beams, limit, complete, *, lp: float):
        """The hypothesis `generate` returns for a sentence whose beam search reached the last step, `limit - 1`
        tokens, before the `</s>` it forces (its log-probability is 0 there).

        `hyps`: (tokens, CTranslate2's score = log-probability / length ** lp), all the finished hypotheses if
        `complete`, else the best `beams` of them. The ones not ending in `</s>` were finished by CTranslate2's
        last step; `generate` completes them with its forced `</s>` (one more token in the length), unless `beams`
        hypotheses ending in `</s>` were already finished, when it stops without them. Returns None when the best
        `beams` do not tell which one `generate` returns.
        """
        ended = [(h, s) for h, s in hyps if h[-1] == self.eos_token]
        # CTranslate2 scores in the "length" form; `generate`'s forced `</s>` makes a hypothesis `limit` tokens long.
        at_limit = length_penalty_divisor("length", limit, lp)
        forced = [
            (h + [self.eos_token], s * length_penalty_divisor("length", len(h), lp) / at_limit)
            for h, s in hyps
            if h[-1] != self.eos_token
        ]
        best_ended = max(ended, key=lambda c: c[1], default=None)
        best_forced = max(forced, key=lambda c: c[1], default=None)
        if complete:
            if len(ended) >= beams or best_forced is None:
                return best_ended
            return max(ended + forced, key=lambda c: c[1])
        # The best `beams` decide when they are the `beams` hypotheses finished at the last step: the others were
        # finished before (ending in </s>) and score below all of these.
        if any(len(h) != limit - 1 for h, _ in hyps):
            return None
        if best_forced is None:
            return best_ended
        if best_ended is None:  # fewer than `beams` end in </s> (only earlier ones can): generate completes these
            return best_forced
        # Whether generate completes the others depends on how many ended before: only a better ended one decides.
        return best_ended if best_ended[1] >= best_forced[1] else None


def translate_ctranslate2(
    model,
    sentences: Sequence[str],
    *,
    batch_size: int = 32,
    num_beams: int | None = None,
    max_new_tokens: int | None = None,
    length_penalty: float | None = None,
    progress=False,
    device: str = "cpu",
    compute_type: str = "default",
    intra_threads: int = 0,
    start: int = 0,
) -> list[str]:
    """Translate `sentences` with an exported model (a directory, or a `CTranslate2Model`): one translation per
    sentence, in input order, as `translate.translate` does with the PyTorch model.

    Each sentence is translated without its outer whitespace, as `translate.translate` does (training strips it).
    Empty (or all-whitespace) sentences give empty translations without running the model; a sentence longer than
    the export takes (`source_limit` tokens, `</s>` included) is truncated to it, with a warning naming its line
    (counting from 1). Decoding: the exported generation settings (the model's generation config: its beam size and
    length penalty, at most source length + 50 tokens) unless `num_beams` / `length_penalty` / `max_new_tokens` say
    otherwise. `progress` and `start` as `translate.translate` takes them (a shared bar; the index of the first
    sentence in the input, for the warnings).
    """
    from tqdm.auto import tqdm

    from .translate import encode_sources  # torch-side module: imported when used, as elsewhere here

    if not isinstance(model, CTranslate2Model):
        model = CTranslate2Model(model, device=device, compute_type=compute_type, intra_threads=intra_threads)
    results = [""] * len(sentences)
    encoded = encode_sources(sentences, model.encode, model.settings["source_limit"], start)  # as `translate` does
    shared_bar = hasattr(progress, "update")
    if shared_bar:
        progress.update(len(sentences) - len(encoded))  # the blank lines, done without the model
    if not encoded:
        return results
    bar = progress if shared_bar else tqdm(total=len(encoded), desc="translate", unit="sent", disable=not progress)
    out = model.generate(
        list(encoded.values()),
        num_beams=num_beams,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
        progress=bar,
        length_penalty=length_penalty,
    )
    if not shared_bar:
        bar.close()
    for i, text in zip(encoded, model.decode(out)):
        results[i] = text.strip()
    return results


__all__ = ["CTranslate2Model", "build_spec", "export_ctranslate2", "import_ctranslate2", "translate_ctranslate2"]
