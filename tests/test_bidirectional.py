"""Bidirectional training (`bidirectional_steps`, BiT): in the first updates, half of the training batches are the
reversed pairs (target -> source), exactly as if the reversed corpus had been collated; later updates and evaluation
are untouched; the choice is reproducible and resumes exactly."""

import datasets
import pytest
import torch
from helpers import read_multi30k
from test_trainer import check_option_resumes_exactly, make_trainer, tiny_model
from transformers import DataCollatorForSeq2Seq

from vanilla_transformer.data.corpus import tokenize_corpus
from vanilla_transformer.data.tokenizer import train_tokenizer
from vanilla_transformer.training.options import VanillaTrainingArguments
from vanilla_transformer.training.trainer import build_trainer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(read_multi30k("train.en.gz", 2000) + read_multi30k("train.de.gz", 2000), vocab_size=1500)


def _pairs(n_train, source="en", target="de"):
    return datasets.DatasetDict(
        train=datasets.Dataset.from_dict(
            {
                "source": read_multi30k(f"train.{source}.gz", n_train),
                "target": read_multi30k(f"train.{target}.gz", n_train),
            }
        ),
        validation=datasets.Dataset.from_dict(
            {"source": read_multi30k(f"val.{source}.gz", 12), "target": read_multi30k(f"val.{target}.gz", 12)}
        ),
    )


@pytest.fixture(scope="module")
def corpus(tokenizer):
    return tokenize_corpus(_pairs(200), tokenizer, max_length=64)


def _trainer(path, tokenizer, corpus, **overrides):
    return make_trainer(path, tiny_model(tokenizer, dropout=0.1), tokenizer, corpus, **overrides)


def test_reversed_batches_are_the_reversed_corpus_collated(tmp_path, tokenizer, corpus):
    reversed_corpus = tokenize_corpus(_pairs(200, source="de", target="en"), tokenizer, max_length=64)
    assert reversed_corpus["train"]["source"] == corpus["train"]["target"]  # the filters kept the same pairs
    columns = ["input_ids", "labels"]
    trainer = _trainer(tmp_path, tokenizer, corpus, bidirectional_steps=1000)
    collate = trainer.data_collator  # given the model: the decoder input too
    rows = list(range(0, 200, 9))  # pairs of different lengths: padding on both sides
    plain = collate([corpus["train"].select_columns(columns)[i] for i in rows])
    expected = collate([reversed_corpus["train"].select_columns(columns)[i] for i in rows])
    seen = {"forward": 0, "reversed": 0}
    for step in range(40):
        trainer.state.global_step = step
        got = trainer._maybe_reverse(dict(plain), 0)
        kind = "reversed" if not torch.equal(got["input_ids"], plain["input_ids"]) else "forward"
        seen[kind] += 1
        want = expected if kind == "reversed" else plain
        assert got.keys() == want.keys()
        for key in want:
            assert torch.equal(got[key], want[key]), (step, key)
    assert 10 <= seen["reversed"] <= 30, seen  # probability 1/2 per update


def test_only_the_first_updates_are_bidirectional_and_the_choice_is_seeded(tmp_path, tokenizer, corpus):
    trainer = _trainer(tmp_path, tokenizer, corpus, bidirectional_steps=30, max_tokens=400)
    sources = set(corpus["train"]["source"])

    def reversed_flags(step):
        trainer.state.global_step = step
        batches, count = trainer.get_batch_samples(iter(trainer.get_train_dataloader()), 2, trainer.args.device)
        assert int(count) == sum(int((b["labels"] != -100).sum()) for b in batches)  # the loss's token count
        flags = []
        for batch in batches:
            first = batch["input_ids"][0][batch["attention_mask"][0].bool()]
            flags.append(tokenizer.decode(first.tolist(), skip_special_tokens=True) not in sources)
        return flags

    early = [reversed_flags(step) for step in range(30)]
    assert 15 <= sum(map(sum, early)) <= 45, early  # 60 micro-batches, each reversed with probability 1/2
    torch.manual_seed(123)  # the global random state does not decide it
    assert [reversed_flags(step) for step in range(5)] == early[:5]
    assert not any(any(reversed_flags(step)) for step in range(30, 40))


def test_a_reversed_batch_gets_the_decoder_input_of_its_new_labels(tmp_path, tokenizer, corpus):
    """The collator given the model (as build_trainer's) makes `decoder_input_ids`: a reversed batch, collated again,
    gets those of its new labels, not the old ones, and its loss is the loss of the reversed pairs."""
    reversed_corpus = tokenize_corpus(_pairs(200, source="de", target="en"), tokenizer, max_length=64)
    trainer = _trainer(tmp_path, tokenizer, corpus, bidirectional_steps=1000)
    model = trainer.model.eval()
    collate = DataCollatorForSeq2Seq(tokenizer, model=model, label_pad_token_id=-100)
    columns, rows = ["input_ids", "labels"], list(range(3, 200, 11))
    plain = collate([corpus["train"].select_columns(columns)[i] for i in rows])
    expected = collate([reversed_corpus["train"].select_columns(columns)[i] for i in rows])
    assert "decoder_input_ids" in plain
    trainer.state.global_step = next(s for s in range(100) if not _is_forward(trainer, plain, s))
    got = trainer._maybe_reverse(plain, 0)
    assert torch.equal(got["decoder_input_ids"], expected["decoder_input_ids"])
    with torch.no_grad():
        assert torch.equal(model(**got).loss, model(**expected).loss)
    # ... and the batch's own decoder input, made from the old labels, is another one.
    old, new = plain["decoder_input_ids"], expected["decoder_input_ids"]
    assert old.shape != new.shape or not torch.equal(old, new)


def _is_forward(trainer, batch, step):
    trainer.state.global_step = step
    return trainer._maybe_reverse(batch, 0) is batch


def test_bidirectional_training_resumes_exactly_and_changes_the_run(tmp_path, tokenizer, corpus):
    check_option_resumes_exactly(
        tmp_path,
        lambda path, **settings: _trainer(path, tokenizer, corpus, max_tokens=1400, **settings),
        bidirectional_steps=5,
    )


@pytest.mark.parametrize("value", [-1, 2.5, True])
def test_bad_bidirectional_steps_are_named(tmp_path, value):
    with pytest.raises(ValueError, match="`bidirectional_steps`"):
        VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], bidirectional_steps=value)


def test_bidirectional_training_needs_a_tokenizer(tmp_path, tokenizer, corpus):
    args = VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, bidirectional_steps=10)
    with pytest.raises(ValueError, match="`bidirectional_steps` turns labels into source tokens.*pass `tokenizer`"):
        build_trainer(tiny_model(tokenizer), args, None, corpus["train"])
