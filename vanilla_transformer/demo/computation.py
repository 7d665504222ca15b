"""What the web demo computes for one input, with no HTML and no Gradio: the source cut to the model's limit, the
translation with the decoding a visitor chose, its attention (`evaluation.attention.attention_weights`), the beam search
step by step, and the word alignment read from the cross-attention.

`views.py` turns these results into the page's HTML (templates/), `page.py` wires them into Gradio.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from ..evaluation.attention import CONTINUATION, AttentionWeights, attention_weights, token_labels
from ..generation_vanilla_transformer import (
    beams_to_keep,
    check_decoding,
    length_penalty_divisor,
    length_penalty_form,
)
from ..pipeline_vanilla_transformer import fit_source


MAX_CHARACTERS = 100_000  # a paste is cut here before it is tokenized at all
DECODINGS = ("model default", "greedy", "beam search", "sampling")
MAX_BEAMS = 64  # the widest beam a visitor may ask for
# The decoding options as the page names them in its messages (check_decoding's `names`).
OPTION_NAMES = {"num_beams": "beam size", "temperature": "temperature", "top_p": "top-p"}
TAIL = 30  # a hypothesis is labelled by its last TAIL tokens (a long one would make megabytes of HTML)
SPECIAL = ("</s>", "<s>", "<pad>", "<unk>")


# ------------------------------------------------------------------------------------------------ input


def prepare_source(text: str, tokenizer, limit: int | None) -> tuple[str, str]:
    """(the sentence to translate, a notice for the visitor): outer whitespace removed, and a text longer than the
    model takes (`limit` tokens with `</s>`, the config's `input_length_limit`) cut at a token boundary so that it
    fits, by the rule `translate` and the pipeline cut a long line with (`fit_source`). The notice is "" when nothing
    was cut."""
    text = (text or "").strip()
    notice = ""
    if len(text) > MAX_CHARACTERS:
        text = text[:MAX_CHARACTERS].rstrip()
        notice = f"The text was cut to its first {MAX_CHARACTERS:,} characters."
    if not text or limit is None:
        return text, notice
    encoding = tokenizer(text, return_offsets_mapping=True, verbose=False)
    ids, message = fit_source(encoding["input_ids"], limit, subject="The text")
    if not message:
        return text, notice
    # The page shows and translates text, so the kept tokens are mapped back to the text they came from.
    offsets = encoding["offset_mapping"]
    keep = len(ids) - 1  # tokens before </s>
    cut = text
    while keep > 0:
        cut = text[: offsets[keep - 1][1]].rstrip()
        if len(tokenizer(cut, verbose=False)["input_ids"]) <= limit:
            break
        keep -= 1  # a cut that tokenizes into more pieces than before: one piece fewer
    return cut, f"{message} Translated: its first {len(cut.split()):,} words (up to \u201c{cut[-40:]}\u201d)."


@dataclass
class Decoding:
    """The decoding a visitor chose: `mode` one of DECODINGS; the other fields apply to their mode."""

    mode: str = "model default"
    num_beams: int = 4
    length_penalty: float = 0.6
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0

    def generate_kwargs(self) -> dict:
        """The options of `generate` for this decoding ({} = the model's generation config)."""
        if self.mode not in DECODINGS:
            raise ValueError(f"decoding must be one of {', '.join(DECODINGS)}, got {self.mode!r}.")
        if self.mode == "model default":
            return {}
        if self.mode == "greedy":
            return {"num_beams": 1, "do_sample": False}
        if self.mode == "beam search":
            check_decoding(num_beams=self.num_beams, max_beams=MAX_BEAMS, names=OPTION_NAMES)
            return {"num_beams": int(self.num_beams), "length_penalty": float(self.length_penalty), "do_sample": False}
        check_decoding(temperature=self.temperature, top_p=self.top_p, names=OPTION_NAMES)
        return {
            "num_beams": 1,
            "do_sample": True,
            "temperature": float(self.temperature),
            "top_k": max(int(self.top_k), 0) or None,
            "top_p": float(self.top_p),
        }


# ------------------------------------------------------------------------------------------------ decoding steps


class StepRecorder(LogitsProcessor):
    """Records the running hypotheses (`input_ids`) at every step of `generate`, changing nothing: with the step's
    scores that `generate` returns (`output_scores=True`) they give the candidates of each step."""

    def __init__(self):
        self.running: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.running.append(input_ids.detach().cpu().clone())
        return scores


@dataclass
class Candidate:
    """One continuation considered at a step: a hypothesis (token ids without the start token) and its score."""

    tokens: list[str]  # labels of the hypothesis' last TAIL tokens, the new one last
    length: int  # of the whole hypothesis, in tokens
    log_prob: float  # cumulative log-probability (beam search) or the new token's log-probability (one hypothesis)
    status: str  # "kept" (continues), "ended" (</s>: a finished hypothesis), "dropped", "chosen", "alternative"
    score: float | None = None  # of an ended hypothesis: log_prob / the form's length penalty, what beams compete on
    final: bool = False  # the hypothesis `generate` returned


@dataclass
class Step:
    index: int
    candidates: list[Candidate]
    attention: list[float] | None = None  # where the translation's token of this step looked (cross, one layer)


def decoding_steps(
    model,
    tokenizer,
    generation,
    recorder: StepRecorder,
    eos_token_ids,
    length_penalty: float,
    length_penalty_form: str = "length",
):
    """The candidates of every step of the `generate` call that returned `generation` (with `output_scores=True`
    and `return_dict_in_generate=True`, `recorder` among its logits processors).

    Beam search (`generation.beam_indices` set): at step t the running beams' scores plus the step's log-probs are
    ranked and the top 2 x beams (per end token) taken, as `generate` does; each is marked kept (a running beam at
    step t + 1), ended (it ends with `</s>` among the best `beams`, or at the length limit) or dropped (also the
    live ones of the last step when the search stopped because no running beam could beat the ended ones). The
    cumulative scores are summed in `generate`'s own order, so they are its numbers, not an approximation; the
    returned hypothesis is the candidate that `generate`'s `beam_indices` lead to.
    Why the ranking is redone here: `generate` returns neither the running beams' scores nor the candidates it dropped.
    One hypothesis (greedy, sampling): at each step the chosen token and the 4 most likely others.
    """
    final = generation.sequences[0].tolist()
    scores = [s.float().cpu() for s in generation.scores]
    # The label of every piece, as `token_labels` gives them for a text (the vocabulary has word-start pieces, so a
    # hypothesis' tail of continuations is labelled "##..." as in the whole sentence).
    labels = token_labels(tokenizer, range(scores[0].shape[-1])) if scores else []
    if getattr(generation, "beam_indices", None) is None:
        steps = []
        for t, step_scores in enumerate(scores):
            log_probs = torch.log_softmax(step_scores[0], dim=-1)
            chosen = final[t + 1]
            prefix = final[1 : t + 1]
            candidates = [Candidate(_tail(labels, prefix + [chosen]), t + 1, float(log_probs[chosen]), "chosen")]
            for token in torch.topk(log_probs, k=min(5, log_probs.shape[0])).indices.tolist():
                if token != chosen and len(candidates) < 5 and log_probs[token] > float("-inf"):
                    candidates.append(
                        Candidate(_tail(labels, prefix + [token]), t + 1, float(log_probs[token]), "alternative")
                    )
            steps.append(Step(t, candidates))
        if steps:
            steps[-1].candidates[0].final = True
        return steps
    beams = recorder.running[0].shape[0]
    # The GNMT form (tensor2tensor's search): any ending candidate of the 2 x beams may finish, not only the best.
    gnmt = length_penalty_form == "gnmt"
    vocab = scores[0].shape[-1]
    keep = beams_to_keep(beams, eos_token_ids)  # the candidates the search ranks per step
    length_limited = not any(t in eos_token_ids for t in final[1:])  # the search ended at its length limit
    # The returned hypothesis: the running beam each of its tokens came from (-1 past its end), so its last token is
    # the candidate (that beam, that token) of the step it ended at.
    origins = [int(i) % beams for i in generation.beam_indices[0].tolist() if i >= 0]
    returned = (len(origins) - 1, origins[-1], final[len(origins)]) if origins else None
    running = torch.full((beams,), -1.0e9)
    running[0] = 0.0  # generate starts with one live beam (the others are copies, scored -1e9)
    steps = []
    for t, step_scores in enumerate(scores):
        sequences = recorder.running[t]
        accumulated = (step_scores + running[:, None]).reshape(-1)
        top, indices = torch.topk(accumulated, k=keep)
        parents, tokens = (indices // vocab).tolist(), (indices % vocab).tolist()
        last = t == len(scores) - 1
        following = {tuple(s[1:].tolist()) for s in recorder.running[t + 1]} if not last else set()
        candidates, next_running = [], {}
        for rank, (parent, token, value) in enumerate(zip(parents, tokens, top.tolist())):
            ids = sequences[parent, 1:].tolist() + [token]
            candidate = Candidate(_tail(labels, ids), len(ids), value, "dropped", final=(t, parent, token) == returned)
            if tuple(ids) in following:
                candidate.status = "kept"
                next_running[tuple(ids)] = top[rank]
            elif (rank < beams or gnmt) and (token in eos_token_ids or (last and length_limited)):
                candidate.status = "ended"
                length = t + 1
                candidate.score = value / length_penalty_divisor(length_penalty_form, length, length_penalty)
            candidates.append(candidate)
        steps.append(Step(t, candidates))
        if not last:
            running = torch.stack([next_running[tuple(s[1:].tolist())] for s in recorder.running[t + 1]])
    return steps


def _tail(labels: list[str], ids) -> list[str]:
    """The labels of the last TAIL tokens of `ids` (the labels of a long hypothesis are all the view shows)."""
    return [labels[i] for i in ids[-TAIL:]]


# ------------------------------------------------------------------------------------------------ one translation


@dataclass
class Result:
    """What the page shows for one input."""

    source: str  # the text translated (stripped; cut to the model's limit)
    translation: str
    notice: str  # "" or what the visitor should know (the input was cut, ...)
    weights: AttentionWeights | None = None
    steps: list[Step] = field(default_factory=list)
    num_beams: int = 1
    length_penalty_form: str = "length"  # how ended hypotheses were scored: "length" or "gnmt"


@torch.no_grad()
def run_translation(model, tokenizer, text: str, decoding: Decoding | None = None, **generate_kwargs) -> Result:
    """Translate `text` with `decoding` (and any other `generate` options, e.g. `max_new_tokens`) and read the
    attention and the decoding steps of that translation."""
    decoding = decoding or Decoding()
    kwargs = {**decoding.generate_kwargs(), **generate_kwargs}  # a bad choice fails before any work
    limit = model.config.input_length_limit(tokenizer) if hasattr(model.config, "input_length_limit") else None
    source, notice = prepare_source(text, tokenizer, limit)
    if not source:
        return Result(source="", translation="", notice=notice or "Type a sentence to translate.")
    config = model.generation_config
    num_beams = kwargs.get("num_beams", config.num_beams or 1)
    length_penalty = kwargs.get("length_penalty", config.length_penalty if config.length_penalty is not None else 1.0)
    form = length_penalty_form(
        config, length_penalty_form=kwargs.get("length_penalty_form"), length_penalty=length_penalty
    )
    recorder = StepRecorder()
    if kwargs.get("do_sample"):
        torch.manual_seed(int(decoding.seed))
    weights = attention_weights(
        model,
        tokenizer,
        source,
        **kwargs,
        logits_processor=LogitsProcessorList([recorder]),
        output_scores=True,
        return_dict_in_generate=True,
    )
    eos = config.eos_token_id if config.eos_token_id is not None else tokenizer.eos_token_id
    eos_ids = set(eos) if isinstance(eos, list | tuple) else {eos}
    steps = decoding_steps(model, tokenizer, weights.generation, recorder, eos_ids, length_penalty, form)
    mean = weights.cross[-1].mean(dim=0)  # last layer, mean of the heads: [target, source]
    for step in steps:
        if step.index < mean.shape[0]:
            step.attention = mean[step.index].tolist()
    return Result(source, weights.translation, notice, weights, steps, num_beams, form)


# ------------------------------------------------------------------------------------------------ word alignment


def words_of(tokens: list[str]) -> list[tuple[str, list[int]]]:
    """(word, token positions) for the tokens labelled by `token_labels`: a "##" piece continues the word before
    it; special tokens (</s>) belong to no word."""
    words: list[tuple[str, list[int]]] = []
    for i, label in enumerate(tokens):
        if label in SPECIAL:
            continue
        if label.startswith(CONTINUATION) and words:
            text, positions = words[-1]
            words[-1] = (text + label[len(CONTINUATION) :], positions + [i])
        else:
            words.append((label, [i]))
    return words


def word_alignment(weights: AttentionWeights, layer: int = -1) -> tuple[list[str], list[str], list[tuple]]:
    """(source words, target words, links): each target word linked to the source word that `layer`'s
    cross-attention, averaged over the heads and summed over the subwords of both words, weighs most.
    A link is (target word index, source word index, weight: the mean over the target word's subwords)."""
    matrix = weights.cross[layer].mean(dim=0)  # [target, source]
    source, target = words_of(weights.source_tokens), words_of(weights.target_tokens)
    links = []
    for t, (_, rows) in enumerate(target):
        per_word = [float(matrix[rows][:, columns].sum(dim=1).mean()) for _, columns in source]
        if per_word:
            best = max(range(len(per_word)), key=per_word.__getitem__)
            links.append((t, best, per_word[best]))
    return [w for w, _ in source], [w for w, _ in target], links


def alignment_layer(value, weights: AttentionWeights) -> int:
    """The cross-attention layer the page's layer control asks for, or -1 (the last) for a value it cannot mean."""
    try:
        layer = int(value)
    except (TypeError, ValueError):
        return -1
    return layer if -weights.cross.shape[0] <= layer < weights.cross.shape[0] else -1


__all__ = [
    "DECODINGS",
    "Candidate",
    "Decoding",
    "Result",
    "Step",
    "StepRecorder",
    "alignment_layer",
    "decoding_steps",
    "prepare_source",
    "run_translation",
    "word_alignment",
    "words_of",
]
