"""BLEU through the bundled `evaluate` module equals sacreBLEU's own, offline."""

import re
import socket
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from helpers import read_multi30k
from transformers import EvalPrediction

from vanilla_transformer.data.tokenizer import train_tokenizer
from vanilla_transformer.evaluation import bleu as metrics
from vanilla_transformer.evaluation.bleu import compute_bleu, make_compute_metrics


read = read_multi30k  # read(name, n): the first n lines of a Multi30k file


@pytest.fixture(scope="module")
def references():
    return read("val.de.gz", 60)


@pytest.fixture(scope="module")
def hypotheses(references):
    # Imperfect "translations": some words dropped, some sentences swapped, one empty, one identical.
    hyps = [" ".join(r.split()[: max(1, len(r.split()) - i % 4)]) for i, r in enumerate(references)]
    hyps[3], hyps[4] = hyps[4], hyps[3]
    hyps[7] = ""
    return hyps


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(read("train.en.gz", 300) + read("train.de.gz", 300), vocab_size=500)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails, and the Hub is declared offline: what works here works offline."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")

    def refuse(*args, **kwargs):
        raise OSError("network access attempted in an offline test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    metrics.load_sacrebleu.cache_clear()  # load the module again, under these conditions
    yield
    metrics.load_sacrebleu.cache_clear()


def test_equals_sacrebleu_directly_and_works_offline(no_network, hypotheses, references):
    result = compute_bleu(hypotheses, references)
    bleu = sacrebleu.BLEU()  # defaults: cased, 13a, exponential smoothing
    direct = bleu.corpus_score(hypotheses, [references])
    assert result["score"] == direct.score
    assert 0 < result["score"] < 100
    assert result["counts"] == direct.counts and result["totals"] == direct.totals
    assert result["bp"] == direct.bp and result["sys_len"] == direct.sys_len and result["ref_len"] == direct.ref_len
    signature = result["signature"]
    assert signature == str(bleu.get_signature())
    assert "case:mixed" in signature and "tok:13a" in signature and "nrefs:1" in signature


def test_cased(hypotheses, references):
    lowered = [h.lower() for h in hypotheses]
    assert compute_bleu(lowered, references)["score"] < compute_bleu(hypotheses, references)["score"]
    assert compute_bleu(lowered, references, lowercase=True)["score"] == pytest.approx(
        sacrebleu.corpus_bleu(lowered, [references], lowercase=True).score
    )


def test_several_references_per_sentence(hypotheses, references):
    second = read("val.en.gz", len(references))  # a poor second reference, but a different one
    result = compute_bleu(hypotheses, [[a, b] for a, b in zip(references, second)])
    assert result["score"] == sacrebleu.corpus_bleu(hypotheses, [references, second]).score
    assert "nrefs:2" in result["signature"]


@pytest.mark.parametrize(
    "predictions, refs, name",
    [
        (["a b"], ["a b", "c d"], "predictions"),
        ("a b", ["a b"], "predictions"),
        (["a b"], "a b", "references"),
        ([], [], "predictions"),
    ],
)
def test_bad_input_names_the_argument(predictions, refs, name):
    with pytest.raises(ValueError, match=name):
        compute_bleu(predictions, refs)


def pad_rows(rows, value, width=None):
    width = width or max(map(len, rows))
    return np.array([row + [value] * (width - len(row)) for row in rows])


def test_compute_metrics_decodes_like_the_trainer_gathers(tokenizer, hypotheses, references):
    # Generated ids start with the decoder start token <s>, end with </s>, are padded with <pad> within a batch and
    # with -100 across batches; labels end with </s> and are padded with -100.
    hyp_ids = [[tokenizer.bos_token_id] + tokenizer(h)["input_ids"] for h in hypotheses]
    rows = [ids + [tokenizer.pad_token_id] * (i % 3) for i, ids in enumerate(hyp_ids)]
    predictions = pad_rows(rows, -100)
    labels = pad_rows([tokenizer(text_target=r)["input_ids"] for r in references], -100)

    result = make_compute_metrics(tokenizer)(EvalPrediction(predictions=predictions, label_ids=labels))
    # This tokenizer decodes exactly (no text is lost, only NFC applied), so the score is the one of the raw text.
    assert result["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hypotheses, [references]).score, abs=1e-9)
    assert result["gen_len"] == pytest.approx(np.mean([len(ids) - 1 for ids in hyp_ids]))

    # The raw references can be given instead of decoding the labels.
    prediction = EvalPrediction(predictions=predictions, label_ids=labels)
    assert make_compute_metrics(tokenizer, references=references)(prediction)["bleu"] == pytest.approx(result["bleu"])
    with pytest.raises(ValueError, match="references"):
        make_compute_metrics(tokenizer, references=references[:-1])(prediction)


def test_compute_metrics_needs_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        make_compute_metrics(None)


def test_the_papers_scores_are_described_as_tokenized_bleu():
    """The paper's 27.3 / 28.4 are tokenized BLEU with compound splitting (tensor2tensor's get_ende_bleu.sh), not
    sacreBLEU's detokenized BLEU: every text of the project that cites them says so, and none says otherwise."""
    root = Path(__file__).resolve().parents[1]
    files = [
        root / "README.md",
        *(root / "vanilla_transformer").rglob("*.py"),
        *(root / "vanilla_transformer").rglob("*.md"),  # the shipped models' cards among them
    ]
    citing = 0
    for path in files:
        for paragraph in path.read_text(encoding="utf-8").split("\n\n"):
            text = " ".join(paragraph.replace("*", "").split())
            assert not re.search(r"paper\W+(reports|uses)\W+(cased\W+)?(BLEU\W+on\W+)?detokeni", text, re.I), path
            if "27.3" in text:
                citing += 1
                assert re.search(r"tokenized BLEU", text) and "compound" in text, (path, text)
    assert citing >= 3  # README, the metric module, the card template (and the cards written from it)


def test_paper_style_bleu_is_tokenized_compound_split_bleu_checked_by_hand():
    """One pair, counted by hand after Moses tokenization and compound splitting:
    hypothesis  Ein gut ##AT##-##AT## bekannter Mann .         (6 tokens)
    reference   Ein gut ##AT##-##AT## bekannter Mann läuft .   (7 tokens)
    n-gram matches 6/6, 4/5, 3/4, 2/3; brevity penalty exp(1 - 7/6);
    BLEU = exp(-1/6) * (1 * 4/5 * 3/4 * 2/3) ** (1/4) = 0.84648 * 0.79527 = 67.318."""
    from vanilla_transformer.evaluation.bleu import paper_style_bleu, paper_style_tokenize

    assert paper_style_tokenize("Ein gut-bekannter Mann.", "de") == "Ein gut ##AT##-##AT## bekannter Mann ."
    assert paper_style_tokenize('a-b-c "x" & y', "en") == "a ##AT##-##AT## b-c &quot; x &quot; &amp; y"  # as Perl's /g
    result = paper_style_bleu(["Ein gut-bekannter Mann."], ["Ein gut-bekannter Mann läuft."], "de")
    assert (result["counts"], result["totals"], result["sys_len"], result["ref_len"]) == (
        [6, 4, 3, 2],
        [6, 5, 4, 3],
        6,
        7,
    )
    assert result["score"] == pytest.approx(67.318, abs=1e-3)
    # sacreBLEU's 13a keeps "gut-bekannter" whole and scores the same output lower: the two are not comparable.
    assert compute_bleu(["Ein gut-bekannter Mann."], ["Ein gut-bekannter Mann läuft."])["score"] < 60
    # multi-bleu.perl has no smoothing: no 4-gram match is BLEU 0.
    assert paper_style_bleu(["a b c"], ["a b c"], "en")["score"] == 0.0


def test_the_moses_languages_are_sacremoses_own():
    # `score --lang` refuses a code before sacremoses is imported (half a second), from this copy of its list.
    from sacremoses.corpus import NonbreakingPrefixes

    from vanilla_transformer.evaluation.bleu import MOSES_LANGUAGES

    assert sorted(MOSES_LANGUAGES) == sorted(set(NonbreakingPrefixes().available_langs.values()))
