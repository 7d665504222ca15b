"""The web demo: a Gradio page that translates what a visitor types and shows how the model got there.

    vanilla-transformer demo --model runs/en-de            # http://127.0.0.1:7860
    vanilla-transformer demo --model your-name/transformer-en-de --write-space space/ --requirement SPEC
    vanilla-transformer demo --model runs/en-de --compare runs/en-de/averaged   # two models side by side

See docs/demo.md for what each view shows. The page has five views of one translation, all read from one call of
`attention_figures.attention_weights` (the same function as the `attention` figures, so the page and the figures
cannot disagree):
  * the translation, by default with the model's generation config (beam and length penalty as the model saved
    them: docs/model.md), or
    greedy, another beam size / length penalty, or sampling;
  * attention as HTML heatmaps: cross-attention as a layer x head grid plus the mean of the heads, encoder and
    decoder self-attention likewise; every cell carries its weight (`data-w`, rounded to `DIGITS` decimals) and a
    hover text naming both tokens;
  * the decoding step by step: at each step the beam's candidates with their cumulative log-probabilities, which
    were kept, which ended with `</s>` and which were dropped, and where that step's cross-attention looked. The
    candidates are recomputed from `generate`'s own per-step scores (`output_scores=True`) and the running beams
    recorded at each step (`StepRecorder`), so they are those of the very search that made the translation;
  * a word alignment: each target word linked to the source word its cross-attention (one layer, mean of the
    heads, summed over the subwords of each word) weighs most.

With a second model (`build_demo(..., compare=...)`) the page translates with both and shows each view of the two
translations side by side, each built by the same functions as for one model.

This module's functions return data and HTML and need no browser; `build_demo` wires them into Gradio, imported
only there (the `demo` extra).
"""

from __future__ import annotations

import html
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from ..attention_figures import CONTINUATION, AttentionWeights, attention_weights, token_labels


logger = logging.getLogger(__name__)

DEMO_HINT = "install the demo extra: pip install '.[demo]' in the vanilla-transformer clone (or pip install gradio)"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 7860
DIGITS = 4  # decimals of the weights shown (and of their data-w attributes)
MAX_CHARACTERS = 100_000  # a paste is cut here before it is tokenized at all
# The queue: one translation at a time (a CPU-bound model gains nothing from running two at once on shared cores),
# and at most QUEUE_SIZE waiting; more visitors get Gradio's "queue is full" answer instead of an unbounded wait.
CONCURRENCY = 1
QUEUE_SIZE = 64
DECODINGS = ("model default", "greedy", "beam search", "sampling")
# What the page draws of a long translation (a 1,000-token paste would otherwise make megabytes of HTML): heatmaps of
# the first SHOWN_TOKENS queries and keys, the first SHOWN_STEPS decoding steps, hypotheses by their last TAIL
# tokens. A notice above a cropped view says so.
SHOWN_TOKENS = 64
SHOWN_STEPS = 100
TAIL = 30
SPECIAL = ("</s>", "<s>", "<pad>", "<unk>")


# ------------------------------------------------------------------------------------------------ input


def prepare_source(text: str, tokenizer, limit: int | None) -> tuple[str, str]:
    """(the sentence to translate, a notice for the visitor): outer whitespace removed, and a text longer than the
    model takes (`limit` tokens with `</s>`, the config's `input_length_limit`) cut at a token boundary so that it
    fits, as `translate` truncates a long line. The notice is "" when nothing was cut."""
    text = (text or "").strip()
    notice = ""
    if len(text) > MAX_CHARACTERS:
        text = text[:MAX_CHARACTERS].rstrip()
        notice = f"The text was cut to its first {MAX_CHARACTERS:,} characters."
    if not text or limit is None:
        return text, notice
    encoding = tokenizer(text, return_offsets_mapping=True, verbose=False)
    total = len(encoding["input_ids"])
    if total <= limit:
        return text, notice
    offsets = encoding["offset_mapping"]
    keep = limit - 1  # tokens before </s>
    cut = text
    while keep > 0:
        cut = text[: offsets[keep - 1][1]].rstrip()
        if len(tokenizer(cut, verbose=False)["input_ids"]) <= limit:
            break
        keep -= 1  # a cut that tokenizes into more pieces than before: one piece fewer
    words = len(cut.split())
    notice = (
        f"The text has {total:,} tokens but the model takes at most {limit}: only its first {words:,} words "
        f"(up to \u201c{cut[-40:]}\u201d) were translated."
    )
    return cut, notice


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
            beams = int(self.num_beams)
            if not 1 <= beams <= 64:
                raise ValueError(f"beam size must be between 1 and 64, got {self.num_beams}.")
            return {"num_beams": beams, "length_penalty": float(self.length_penalty), "do_sample": False}
        if not self.temperature > 0:
            raise ValueError(f"temperature must be above 0, got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}.")
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
    score: float | None = None  # of an ended hypothesis: log_prob / length ** length_penalty, what beams compete on
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
    cumulative scores are summed in `generate`'s own order, so they are its numbers, not an approximation.
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
    keep = max(2, 1 + len(eos_token_ids)) * beams  # generate's `beams_to_keep`
    length_limited = not any(t in eos_token_ids for t in final[1:])  # the search ended at its length limit
    running = torch.full((beams,), -1.0e9)
    running[0] = 0.0  # generate starts with one live beam (the others are copies, scored -1e9)
    final_ids = tuple(t for t in final[1:] if t not in eos_token_ids)
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
            candidate = Candidate(_tail(labels, ids), len(ids), value, "dropped")
            if tuple(ids) in following:
                candidate.status = "kept"
                next_running[tuple(ids)] = top[rank]
            elif (rank < beams or gnmt) and (token in eos_token_ids or (last and length_limited)):
                candidate.status = "ended"
                candidate.score = value / (((5 + t + 1) / 6 if gnmt else t + 1) ** length_penalty)
                candidate.final = tuple(i for i in ids if i not in eos_token_ids) == final_ids
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
    form = kwargs.get("length_penalty_form", getattr(config, "length_penalty_form", None) or "length")
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


# ------------------------------------------------------------------------------------------------ HTML


def _e(text) -> str:
    return html.escape(str(text), quote=True)


def _weight(value: float) -> str:
    return f"{value:.{DIGITS}f}"


def _shade(value: float) -> str:
    return f"w{min(int(value * 10), 9)}"


def heatmap_html(matrix: torch.Tensor, rows: list[str], columns: list[str], *, kind: str, layer, head) -> str:
    """One heatmap as an HTML table: a row per query (`rows`), a column per key (`columns`), each cell's weight in
    `data-w` and a hover text naming both tokens."""
    row_name, column_name = ("target", "source") if kind == "cross" else ("query", "key")
    heads = f"<th></th>{''.join(f'<th class=col>{_e(c)}</th>' for c in columns)}"
    body = []
    values = matrix.tolist()
    for i, row in enumerate(rows):
        cells = "".join(
            f'<td class={_shade(w)} data-w="{_weight(w)}" title="{row_name} {_e(row)} \u00b7 {column_name} '
            f'{_e(columns[j])} \u00b7 {_weight(w)}"></td>'
            for j, w in enumerate(values[i])
        )
        body.append(f"<tr><th class=row>{_e(row)}</th>{cells}</tr>")
    title = f"layer {layer}, {'mean of heads' if head == 'mean' else f'head {head}'}"
    return (
        f'<figure class=vt-panel><figcaption>{title}</figcaption><table class=vt-att data-kind="{kind}" '
        f'data-layer="{layer}" data-head="{head}"><tr>{heads}</tr>{"".join(body)}</table></figure>'
    )


def attention_html(weights: AttentionWeights, kind: str) -> str:
    """A layer x head grid of heatmaps of `kind` attention ("cross", "encoder", "decoder"), each row of the grid
    ending with the mean of that layer's heads."""
    tensor = weights.of(kind)
    if kind == "cross":
        rows, columns = weights.target_tokens, weights.source_tokens
        legend = "Rows: the target token written; columns: the source tokens it looked at."
    elif kind == "encoder":
        rows = columns = weights.source_tokens
        legend = "Rows: each source token (query); columns: the source tokens it attends to (keys)."
    else:
        rows = columns = weights.decoder_input_tokens
        legend = (
            "Rows: each decoder position, by the token it reads (query); columns: the earlier ones (keys, masked)."
        )
    note = ""
    if len(rows) > SHOWN_TOKENS or len(columns) > SHOWN_TOKENS:
        note = f" Shown: the first {SHOWN_TOKENS} tokens of each side (of {len(rows)} x {len(columns)})."
        rows, columns = rows[:SHOWN_TOKENS], columns[:SHOWN_TOKENS]
        tensor = tensor[:, :, :SHOWN_TOKENS, :SHOWN_TOKENS]
    grid = []
    for layer in range(tensor.shape[0]):
        panels = [
            heatmap_html(tensor[layer, h], rows, columns, kind=kind, layer=layer, head=h)
            for h in range(tensor.shape[1])
        ]
        panels.append(heatmap_html(tensor[layer].mean(dim=0), rows, columns, kind=kind, layer=layer, head="mean"))
        grid.append(f"<div class=vt-layer>{''.join(panels)}</div>")
    return f'<div class="vt-grid vt-{kind}"><p class=vt-legend>{_e(legend)} Hover a cell for its weight.{note}</p>{"".join(grid)}</div>'


def _hypothesis(tokens: list[str]) -> str:
    words = []
    for label in tokens:
        if label in SPECIAL:
            words.append(f"<span class=vt-special>{_e(label)}</span>")
        else:
            words.append(_e(label))
    return " ".join(words)


def steps_html(result: Result) -> str:
    """The decoding step by step: one collapsible section per step with its candidates and where the step's
    cross-attention looked (the translation's token at that step; last layer, mean of the heads)."""
    if not result.steps:
        return "<p class=vt-legend>Nothing decoded yet.</p>"
    weights = result.weights
    beam = result.num_beams > 1
    penalty = (
        "((5 + length) / 6)<sup>length penalty</sup> (GNMT)"
        if result.length_penalty_form == "gnmt"
        else "length<sup>length penalty</sup>"
    )
    intro = (
        f"Beam search with {result.num_beams} beams: at each step the {2 * result.num_beams} best continuations of "
        "the running beams by cumulative log-probability; <b>kept</b> ones continue, <b>ended</b> ones (&lt;/s&gt;) "
        f"compete on log-probability / {penalty}, the rest are <b>dropped</b>. "
        "\u2605 marks the returned translation."
        if beam
        else "One hypothesis: at each step the chosen token and the most likely others, with their log-probabilities."
    )
    if len(result.steps) > SHOWN_STEPS:
        intro += f" Shown: the first {SHOWN_STEPS} of {len(result.steps)} steps."
    parts = [f"<p class=vt-legend>{intro}</p>"]
    for step in result.steps[:SHOWN_STEPS]:
        rows = []
        for rank, c in enumerate(step.candidates):
            score = "" if c.score is None else _weight(c.score)
            star = " \u2605" if c.final else ""
            more = "\u2026 " if c.length > len(c.tokens) else ""
            rows.append(
                f'<tr class="vt-{c.status}" data-rank="{rank}" data-status="{c.status}" '
                f'data-log-prob="{c.log_prob:.6f}" data-score="{score}" data-final="{int(c.final)}" '
                f'data-length="{c.length}" data-tokens="{_e(" ".join(c.tokens))}">'
                f"<td>{more}{_hypothesis(c.tokens)}{star}</td>"
                f"<td>{c.log_prob:.3f}</td><td>{score}</td><td>{c.status}</td></tr>"
            )
        looked = ""
        if step.attention is not None and weights is not None:
            token = weights.target_tokens[step.index]
            cells = "".join(
                f'<span class="vt-src {_shade(w)}" data-w="{_weight(w)}" title="{_e(s)} \u00b7 {_weight(w)}">'
                f"{_e(s)}</span>"
                for s, w in zip(weights.source_tokens, step.attention)
            )
            looked = f"<div class=vt-looked>writing <b>{_e(token)}</b>, cross-attention looked at: {cells}</div>"
        header = "<tr><th>hypothesis</th><th>log-prob</th><th>score</th><th></th></tr>"
        parts.append(
            f'<details class=vt-step data-step="{step.index}"{" open" if step.index == 0 else ""}>'
            f"<summary>step {step.index + 1}</summary><table class=vt-cands>{header}{''.join(rows)}</table>"
            f"{looked}</details>"
        )
    return "".join(parts)


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


def alignment_html(weights: AttentionWeights, layer: int = -1) -> str:
    """The word alignment drawn as an SVG: source words above, target words below, a line per link."""
    source, target, links = word_alignment(weights, layer)
    if not source or not target:
        return "<p class=vt-legend>No words to align.</p>"
    layer_index = layer % weights.cross.shape[0]
    char = 8.5

    def place(words):
        xs, x = [], 10.0
        for w in words:
            width = max(len(w), 2) * char + 16
            xs.append(x + width / 2)
            x += width
        return xs, x

    xs_source, width_source = place(source)
    xs_target, width_target = place(target)
    width = max(width_source, width_target) + 10
    parts = [f'<svg class=vt-align xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="150">']
    for t, s, w in links:
        parts.append(
            f'<line x1="{xs_source[s]:.1f}" y1="34" x2="{xs_target[t]:.1f}" y2="116" stroke="#2563eb" '
            f'stroke-width="{1 + 3 * w:.2f}" stroke-opacity="{0.3 + 0.7 * w:.2f}" data-source="{s}" '
            f'data-target="{t}" data-w="{_weight(w)}"><title>{_e(source[s])} \u2192 {_e(target[t])} \u00b7 '
            f"{_weight(w)}</title></line>"
        )
    for words, xs, y in ((source, xs_source, 24), (target, xs_target, 136)):
        for word, x in zip(words, xs):
            parts.append(f'<text x="{x:.1f}" y="{y}" text-anchor="middle">{_e(word)}</text>')
    parts.append("</svg>")
    legend = (
        f"Each target word (below) is linked to the source word (above) that layer {layer_index}'s cross-attention, "
        "averaged over the heads and summed over subwords, weighs most."
    )
    return f"<div class=vt-alignment><p class=vt-legend>{_e(legend)}</p>{''.join(parts)}</div>"


DEMO_CSS = """
.vt-grid, .vt-alignment, .vt-steps { overflow-x: auto; }
.vt-layer { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 8px; }
.vt-panel { margin: 0; }
.vt-panel figcaption { font-size: 12px; }
table.vt-att { border-collapse: collapse; font-size: 11px; }
table.vt-att td { width: 14px; height: 14px; padding: 0 !important; border: 1px solid #eee; }
table.vt-att tr { line-height: 14px; }
table.vt-att th.col { writing-mode: vertical-rl; transform: rotate(180deg); font-weight: normal; padding: 2px 0; }
table.vt-att th.row { text-align: right; font-weight: normal; padding: 0 4px 0 0 !important; white-space: nowrap; }
table.vt-att th.col { padding: 2px 0 !important; }
.w0 { background: rgba(37, 99, 235, 0.02); } .w1 { background: rgba(37, 99, 235, 0.1); }
.w2 { background: rgba(37, 99, 235, 0.2); } .w3 { background: rgba(37, 99, 235, 0.3); }
.w4 { background: rgba(37, 99, 235, 0.4); } .w5 { background: rgba(37, 99, 235, 0.5); }
.w6 { background: rgba(37, 99, 235, 0.6); } .w7 { background: rgba(37, 99, 235, 0.7); }
.w8 { background: rgba(37, 99, 235, 0.8); } .w9 { background: rgba(37, 99, 235, 0.9); }
.vt-legend { font-size: 13px; }
table.vt-cands { font-size: 13px; border-collapse: collapse; }
table.vt-cands td, table.vt-cands th { padding: 1px 8px; text-align: left; }
tr.vt-kept { background: #ecfdf5; } tr.vt-ended { background: #eff6ff; } tr.vt-dropped { color: #9ca3af; }
tr.vt-chosen { background: #ecfdf5; } .vt-special { color: #6b7280; font-family: monospace; }
.vt-src { padding: 0 3px; margin: 0 1px; border-radius: 3px; }
svg.vt-align text { font-size: 14px; fill: currentColor; }
"""


# ------------------------------------------------------------------------------------------------ Gradio


def import_gradio():
    """gradio, with its usage statistics off; ImportError naming the extra when it is missing."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    try:
        import gradio
    except ImportError:
        raise ImportError(f"The demo needs gradio: {DEMO_HINT}") from None
    return gradio


def theme():
    """Gradio's default theme with system fonts: the page then asks no font server for anything."""
    gr = import_gradio()
    return gr.themes.Default(font=["system-ui", "sans-serif"], font_mono=["ui-monospace", "monospace"])


def translate_for_page(
    model, tokenizer, text, mode, num_beams, length_penalty, temperature, top_k, top_p, seed, layer
):
    """The page's handler: (translation, notice, cross, encoder, decoder, steps, alignment HTML, weights). Never
    raises for what a visitor can type or choose: a bad choice or an unexpected failure becomes the notice."""
    empty = ("", "", "", "", "", "", "", None)
    try:
        decoding = Decoding(
            mode=mode or "model default",
            num_beams=int(num_beams or 1),
            length_penalty=float(length_penalty if length_penalty is not None else 1.0),
            temperature=float(temperature if temperature is not None else 1.0),
            top_k=int(top_k or 0),
            top_p=float(top_p if top_p is not None else 1.0),
            seed=int(seed or 0),
        )
        result = run_translation(model, tokenizer, text if isinstance(text, str) else "", decoding)
    except ValueError as error:
        return ("", f"\u26a0 {error}", *empty[2:])
    except Exception:  # the server must answer, whatever happened: the visitor sees one line, the log the rest
        logger.exception("The demo failed to translate %r", (text or "")[:200])
        return ("", "\u26a0 The translation failed (an internal error, logged on the server).", *empty[2:])
    if result.weights is None:
        return (result.translation, result.notice, *empty[2:])
    return (
        result.translation,
        result.notice,
        attention_html(result.weights, "cross"),
        attention_html(result.weights, "encoder"),
        attention_html(result.weights, "decoder"),
        steps_html(result),
        alignment_html(result.weights, _layer(layer, result.weights)),
        result.weights,
    )


def _layer(value, weights: AttentionWeights) -> int:
    try:
        layer = int(value)
    except (TypeError, ValueError):
        return -1
    return layer if -weights.cross.shape[0] <= layer < weights.cross.shape[0] else -1


def vocabulary_difference(tokenizer, other) -> str:
    """An empty string when `other` has `tokenizer`'s vocabulary (the same token at every id), else what differs."""
    first, second = tokenizer.get_vocab(), other.get_vocab()
    if first == second:
        return ""
    if len(first) != len(second):
        return f"{len(second):,} tokens where the first has {len(first):,}"
    differing = sorted(token for token, index in second.items() if first.get(token) != index)
    return f"{len(differing):,} of its {len(second):,} tokens differ from the first's, e.g. {differing[0]!r}"


def compare_for_page(sides, text, mode, num_beams, length_penalty, temperature, top_k, top_p, seed, *layers):
    """The page's handler for the models `sides` ([(model, tokenizer, name), ...], one `layers` value each): each
    model's `translate_for_page` outputs, grouped by output: (translation of each model, the notice, each model's
    cross-attention, ..., each model's alignment, each model's weights). For one model, `translate_for_page`'s."""
    controls = (mode, num_beams, length_penalty, temperature, top_k, top_p, seed)
    outputs = [
        translate_for_page(model, tokenizer, text, *controls, layer)
        for (model, tokenizer, _), layer in zip(sides, layers, strict=True)
    ]
    by_output = list(zip(*outputs))  # one tuple per output: its value for each model
    notices = by_output[1]
    notice = notices[0]
    if any(n != notice for n in notices):  # one model's own trouble (a failure), told with its name
        notice = "\n\n".join(f"**{html.escape(name)}**: {n}" for (*_, name), n in zip(sides, notices) if n)
    return (*by_output[0], notice, *(value for values in by_output[2:] for value in values))


def build_demo(model, tokenizer, *, model_name: str = "model", compare: tuple | None = None):
    """The Gradio Blocks of the page for `model` (not launched: `launch_demo` does, with the theme and CSS).
    The model is switched to eager attention once, so that `attention_weights` need not switch it per request
    (which concurrent requests would race on).

    `compare=(model_b, tokenizer_b, name_b)`: the page translates with both models (each with its own generation
    config by default; the decoding controls apply to both) and shows the two translations and, in every view, the
    two models' views side by side, each column headed by its model's name. `tokenizer_b` must have `tokenizer`'s
    vocabulary (ValueError otherwise)."""
    gr = import_gradio()
    sides = [(model, tokenizer, model_name)]
    if compare is not None:
        model_b, tokenizer_b, name_b = compare
        difference = vocabulary_difference(tokenizer, tokenizer_b)
        if difference:
            raise ValueError(
                f"the model to compare, {name_b!r}, has another vocabulary than {model_name!r} ({difference}): "
                "both must read the visitor's sentence as the same tokens."
            )
        sides.append((model_b, tokenizer_b, name_b))
    for side, _, _ in sides:
        if side.config._attn_implementation != "eager":
            side.set_attn_implementation("eager")
        side.eval()
    config = model.generation_config
    names = [name for _, _, name in sides]
    suffixes = [""] if len(sides) == 1 else ["-a", "-b"]

    def handler(*inputs):
        return compare_for_page(sides, *inputs)

    def realign(weights, layer):
        if weights is None:
            return ""
        return alignment_html(weights, _layer(layer, weights))

    def side_by_side(make) -> list:
        """`make(index, suffix)` for each model: as is for one model, else in columns headed by the models' names."""
        if len(sides) == 1:
            return [make(0, "")]
        made = []
        with gr.Row(equal_height=False):
            for index, (name, suffix) in enumerate(zip(names, suffixes)):
                with gr.Column(min_width=0):
                    gr.Markdown(f"**{html.escape(name)}**", elem_classes="vt-model-name")
                    made.append(make(index, suffix))
        return made

    def alignment_column(index, suffix):
        layers = sides[index][0].config.decoder_layers
        layer = gr.Dropdown(
            [(f"layer {i}", i) for i in range(layers)],
            value=layers - 1,
            label="Cross-attention layer",
            elem_id=f"vt-layer{suffix}" if suffix else None,
        )
        return layer, gr.HTML(elem_id=f"vt-alignment-view{suffix}")

    title = " vs ".join(names)
    heading = (
        "type a sentence, translate it, and look at what the model attended to."
        if len(sides) == 1
        else "type a sentence, translate it with both models, and compare what each attended to."
    )
    with gr.Blocks(title=f"vanilla-transformer: {title}", analytics_enabled=False) as demo:
        gr.Markdown(f"## {html.escape(title)}\nThe Transformer of *Attention Is All You Need*: {heading}")
        with gr.Row():
            source = gr.Textbox(label="Source", lines=3, elem_id="vt-source", placeholder="A man is riding a bicycle.")
            translations = [
                gr.Textbox(
                    label="Translation" if len(sides) == 1 else f"Translation: {name}",
                    lines=3,
                    elem_id=f"vt-translation{suffix}",
                    interactive=False,
                )
                for name, suffix in zip(names, suffixes)
            ]
        notice = gr.Markdown(elem_id="vt-notice")
        with gr.Row():
            mode = gr.Radio(list(DECODINGS), value="model default", label="Decoding", elem_id="vt-mode")
            button = gr.Button("Translate", variant="primary", elem_id="vt-translate")
        with gr.Accordion("Decoding options", open=False):
            with gr.Row():
                beams = gr.Slider(1, 16, value=config.num_beams or 1, step=1, label="Beam size (beam search)")
                penalty = gr.Slider(0.0, 2.0, value=config.length_penalty or 1.0, step=0.1, label="Length penalty")
            with gr.Row():
                temperature = gr.Slider(0.1, 2.0, value=1.0, step=0.1, label="Temperature (sampling)")
                top_k = gr.Slider(0, 100, value=0, step=1, label="Top-k (0 = off)")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
                seed = gr.Number(value=0, precision=0, label="Seed")
        weights = [gr.State(None) for _ in sides]
        with gr.Tabs():
            with gr.Tab("Cross-attention", elem_id="vt-tab-cross"):
                cross = side_by_side(lambda _, suffix: gr.HTML(elem_id=f"vt-cross-view{suffix}"))
            with gr.Tab("Encoder self-attention", elem_id="vt-tab-encoder"):
                encoder = side_by_side(lambda _, suffix: gr.HTML(elem_id=f"vt-encoder-view{suffix}"))
            with gr.Tab("Decoder self-attention", elem_id="vt-tab-decoder"):
                decoder = side_by_side(lambda _, suffix: gr.HTML(elem_id=f"vt-decoder-view{suffix}"))
            with gr.Tab("Decoding steps", elem_id="vt-tab-steps"):
                steps = side_by_side(lambda _, suffix: gr.HTML(elem_id=f"vt-steps-view{suffix}"))
            with gr.Tab("Word alignment", elem_id="vt-tab-alignment"):
                layers, alignments = zip(*side_by_side(alignment_column))
        inputs = [source, mode, beams, penalty, temperature, top_k, top_p, seed, *layers]
        outputs = [*translations, notice, *cross, *encoder, *decoder, *steps, *alignments, *weights]
        button.click(handler, inputs, outputs, api_name="translate")
        source.submit(handler, inputs, outputs, api_name=False)
        for state, layer, alignment in zip(weights, layers, alignments):
            layer.change(realign, [state, layer], alignment, api_name=False)
    demo.queue(default_concurrency_limit=CONCURRENCY, max_size=QUEUE_SIZE)
    return demo


def launch_demo(demo, *, host: str | None = DEFAULT_HOST, port: int | None = DEFAULT_PORT, share: bool = False, **kw):
    """Start the page's server (blocks unless `prevent_thread_lock=True`); host None = Gradio's own default
    (GRADIO_SERVER_NAME, as on a Space). Returns what `Blocks.launch` returns."""
    return demo.launch(
        server_name=host,
        server_port=port,
        share=share,
        theme=theme(),
        css=DEMO_CSS,
        footer_links=["api"],
        **kw,
    )


# ------------------------------------------------------------------------------------------------ Space


SPACE_APP = '''"""A Gradio Space running the vanilla-transformer demo for the model {repo_id!r}.

Written by `vanilla-transformer demo --write-space`; see docs/demo.md of vanilla-transformer.
"""

from vanilla_transformer.demo import build_demo, launch_demo
from vanilla_transformer.loading import load_model


MODEL = {repo_id!r}
REVISION = {revision!r}

model, tokenizer = load_model(MODEL, revision=REVISION, device="cpu")
demo = build_demo(model, tokenizer, model_name=MODEL)

if __name__ == "__main__":
    launch_demo(demo, host=None, port=None)
'''

SPACE_README = """---
title: {title}
emoji: 🔤
colorFrom: blue
colorTo: indigo
sdk: gradio
sdk_version: {gradio_version}
app_file: app.py
pinned: false
models:
  - {repo_id}
---

The vanilla-transformer demo for [{repo_id}](https://huggingface.co/{repo_id}): translate a sentence, look at its
attention, step through the beam search, read the word alignment.
"""


def repository_url() -> str | None:
    """The project's repository as the installed package's metadata records it (`Repository` in pyproject.toml's
    `[project.urls]`), or None where it records none."""
    from importlib.metadata import PackageNotFoundError, metadata

    try:
        entries = metadata("vanilla-transformer").get_all("Project-URL") or []
    except PackageNotFoundError:
        return None
    for entry in entries:
        label, _, url = entry.partition(",")
        if label.strip().lower() == "repository" and url.strip():
            return url.strip()
    return None


def space_requirement(requirement: str | None = None) -> str:
    """The line of the Space's requirements.txt that installs this package with its demo extra: `requirement`, or
    the project's repository as a git URL. The package is not on PyPI, so a bare `vanilla-transformer[demo]` would
    not resolve; without a repository URL in the package's metadata `requirement` must be given."""
    if requirement is None:
        url = repository_url()
        if url is None:
            raise ValueError(
                "--write-space needs --requirement: vanilla-transformer is not on PyPI and this installation records "
                "no repository URL, so say how the Space installs it, e.g. --requirement "
                "'vanilla-transformer[demo] @ git+https://github.com/YOUR_NAME/vanilla-transformer'."
            )
        requirement = f"vanilla-transformer[demo] @ git+{url}"
    if not requirement.strip() or "\n" in requirement:
        raise ValueError(f"--requirement {requirement!r}: pass one requirement line (a pip requirement or URL).")
    return requirement.strip()


def write_space(directory, repo_id: str, *, revision: str | None = None, requirement: str | None = None) -> Path:
    """Write a Gradio Space for the Hub model `repo_id` into `directory` (created; must be empty if it exists):
    `app.py` (loads the model and runs this demo), `requirements.txt` (`space_requirement(requirement)`: the package
    with its demo extra, from a `git+https://...` URL or wherever `requirement` says) and `README.md` (the Space's
    metadata). Upload it with `hf upload --repo-type space NAME DIRECTORY`."""
    if not isinstance(repo_id, str) or not repo_id.strip() or repo_id.count("/") > 1:
        raise ValueError(
            f"--model {repo_id!r}: a Space loads its model from the Hub; pass a repo id 'namespace/name'."
        )
    path = Path(directory)
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise ValueError(f"--write-space {str(directory)!r} exists and is not an empty directory: pass a new one.")
    requirement = space_requirement(requirement)
    try:
        from importlib.metadata import version

        gradio_version = version("gradio")
    except Exception:
        gradio_version = "6.31.0"
    path.mkdir(parents=True, exist_ok=True)
    (path / "app.py").write_text(SPACE_APP.format(repo_id=repo_id, revision=revision), encoding="utf-8")
    (path / "requirements.txt").write_text(f"{requirement}\ngradio=={gradio_version}\n", encoding="utf-8")
    title = repo_id.split("/")[-1][:30]
    (path / "README.md").write_text(
        SPACE_README.format(title=title, gradio_version=gradio_version, repo_id=repo_id), encoding="utf-8"
    )
    return path


__all__ = [
    "DECODINGS",
    "Decoding",
    "Result",
    "StepRecorder",
    "alignment_html",
    "attention_html",
    "build_demo",
    "compare_for_page",
    "decoding_steps",
    "launch_demo",
    "prepare_source",
    "repository_url",
    "run_translation",
    "space_requirement",
    "steps_html",
    "vocabulary_difference",
    "word_alignment",
    "write_space",
]
