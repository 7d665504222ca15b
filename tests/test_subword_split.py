"""Subword splitting (training/augmentation.py): the merge tree read from the tokenizer, splits that keep the text and have
the expected length, collated batches split and padded again, and the trainer's training batches (and only those)
split, reproducibly and resumably."""

import math

import datasets
import pytest
import torch
from helpers import read_multi30k
from test_trainer import check_option_resumes_exactly, make_trainer, tiny_model
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import DataCollatorForSeq2Seq, PreTrainedTokenizerFast

from vanilla_transformer.data.corpus import tokenize_corpus
from vanilla_transformer.data.tokenizer import train_tokenizer
from vanilla_transformer.training.augmentation import merge_tree, sentence_pairs, split_batch, split_subwords
from vanilla_transformer.training.options import VanillaTrainingArguments
from vanilla_transformer.training.trainer import build_trainer


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(read_multi30k("train.en.gz", 3000) + read_multi30k("train.de.gz", 3000), vocab_size=2000)


@pytest.fixture(scope="module")
def encoded(tokenizer):
    """300 validation sentences of each language (unseen by the tokenizer), encoded as the data pipeline does."""
    lines = read_multi30k("val.en.gz", 300) + read_multi30k("val.de.gz", 300)
    return lines, tokenizer(lines)["input_ids"]


def test_the_parts_of_every_merged_token_spell_it(tokenizer):
    left, right = merge_tree(tokenizer)
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    merged = (left >= 0).nonzero().flatten().tolist()
    # Everything but the 4 specials, the 256 byte tokens and the base characters comes from a merge.
    assert len(merged) > len(tokenizer) - 400
    for i in merged:
        assert tokens[left[i]] + tokens[right[i]] == tokens[i], i
        assert left[i] != i and right[i] != i
    for special in tokenizer.all_special_ids:
        assert left[special] == -1


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_splitting_keeps_the_text_and_the_end_of_sentence(tokenizer, encoded, p):
    lines, ids = encoded
    left, right = merge_tree(tokenizer)
    torch.manual_seed(0)
    split = split_subwords(ids, left, right, p)
    assert len(split) == len(ids)
    assert sum(map(len, split)) > sum(map(len, ids))
    changed = 0
    for line, original, pieces in zip(lines, ids, split):
        assert tokenizer.decode(pieces, skip_special_tokens=True) == line
        assert pieces[-1] == tokenizer.eos_token_id and pieces.count(tokenizer.eos_token_id) == 1
        changed += pieces != original
    assert changed > len(ids) // 4


def expected_length(left, right, p):
    """E[number of tokens a token becomes] = 1 for a token that is no merge, else (1 - p) + p (E[left] + E[right]):
    computed over the merge tree in id order, since a merge's parts have smaller ids than it (BPE adds tokens in
    merge order)."""
    e = torch.ones(left.numel(), dtype=torch.float64)
    for i in (left >= 0).nonzero().flatten().tolist():
        assert left[i] < i and right[i] < i
        e[i] = (1 - p) + p * (e[left[i]] + e[right[i]])
    return e


def test_sentences_grow_as_the_recursive_draw_predicts(tokenizer, encoded):
    """Every merge undone with probability p, the parts drawn again: the mean length over many draws matches the
    expectation computed over the merge tree (a split that drew only once, or kept redrawing kept tokens, would
    not)."""
    _, ids = encoded
    left, right = merge_tree(tokenizer)
    p = 0.3
    e = expected_length(left, right, p)
    predicted = sum(float(e[torch.tensor(s)].sum()) for s in ids)
    torch.manual_seed(1)
    draws = [sum(map(len, split_subwords(ids, left, right, p))) for _ in range(20)]
    measured = sum(draws) / len(draws)
    assert abs(measured - predicted) / predicted < 0.01, (measured, predicted, sum(map(len, ids)))
    # And p=0.1 (BPE-dropout's value) lengthens these sentences by a few tokens in a hundred, not by half.
    growth = float(sum(expected_length(left, right, 0.1)[torch.tensor(s)].sum() for s in ids)) / sum(map(len, ids))
    assert 1.02 < growth < 1.3


def test_same_seed_same_split_and_no_split_at_zero(tokenizer, encoded):
    _, ids = encoded
    left, right = merge_tree(tokenizer)
    assert split_subwords(ids, left, right, 0.0) == [list(s) for s in ids]
    torch.manual_seed(3)
    first = split_subwords(ids, left, right, 0.2)
    torch.manual_seed(3)
    assert split_subwords(ids, left, right, 0.2) == first
    assert split_subwords(ids, left, right, 0.2) != first  # the generator moved on


def test_a_sentence_that_would_outgrow_max_length_stays_whole(tokenizer, encoded):
    _, ids = encoded
    left, right = merge_tree(tokenizer)
    limit = 20
    torch.manual_seed(0)
    split = split_subwords(ids, left, right, 0.5, max_length=limit)
    torch.manual_seed(0)
    unlimited = split_subwords(ids, left, right, 0.5)
    kept = 0
    for original, pieces, free in zip(ids, split, unlimited):
        if len(free) > limit:
            assert pieces == list(original)
            kept += 1
        else:
            assert pieces == free
    assert kept > 0


def test_bad_input_is_named(tokenizer):
    left, right = merge_tree(tokenizer)
    with pytest.raises(ValueError, match="-100"):
        split_subwords([[5, 6, -100]], left, right, 0.1)
    with pytest.raises(ValueError, match="outside the tokenizer's vocabulary"):
        split_subwords([[5, len(tokenizer) + 7]], left, right, 0.1)
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        split_subwords([[5]], left, right, 1.0)
    word_level = PreTrainedTokenizerFast(
        tokenizer_object=_word_level_tokenizer(), unk_token="<unk>", pad_token="<pad>", eos_token="</s>"
    )
    with pytest.raises(ValueError, match="'WordLevel', not 'BPE'"):
        merge_tree(word_level)
    with pytest.raises(ValueError, match="fast tokenizer"):
        merge_tree(object())


def _word_level_tokenizer():
    tok = Tokenizer(models.WordLevel({"<pad>": 0, "</s>": 1, "<unk>": 2, "a": 3}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def test_a_collated_batch_is_split_into_pairs_for_the_collator(tokenizer, encoded):
    """`sentence_pairs` undoes the collator's padding (the features come back); `split_batch` splits both sides of
    them, the text unchanged, each side's longest sentence grown by at most half (p)."""
    lines, ids = encoded
    features = [{"input_ids": ids[i], "labels": ids[300 + i]} for i in range(8)]
    plain = DataCollatorForSeq2Seq(tokenizer, model=tiny_model(tokenizer), label_pad_token_id=-100)(features)
    pairs = sentence_pairs(plain, tokenizer.pad_token_id)
    assert pairs == features
    left, right = merge_tree(tokenizer)
    split = split_batch(pairs, left, right, 0.5, generator=torch.Generator().manual_seed(0))
    for name in ("input_ids", "labels"):
        widest = max(len(pair[name]) for pair in pairs)
        assert widest < max(len(pair[name]) for pair in split) <= math.ceil(widest * 1.5)
    for i, pair in enumerate(split):
        assert tokenizer.decode(pair["input_ids"], skip_special_tokens=True) == lines[i]
        assert tokenizer.decode(pair["labels"], skip_special_tokens=True) == lines[300 + i]
    with pytest.raises(ValueError, match="decoder_attention_mask"):
        sentence_pairs({**plain, "decoder_attention_mask": plain["attention_mask"]}, tokenizer.pad_token_id)


# ---- In the trainer ----


@pytest.fixture(scope="module")
def corpus(tokenizer):
    pairs = datasets.DatasetDict(
        train=datasets.Dataset.from_dict(
            {"source": read_multi30k("train.en.gz", 200), "target": read_multi30k("train.de.gz", 200)}
        ),
        validation=datasets.Dataset.from_dict(
            {"source": read_multi30k("val.en.gz", 12), "target": read_multi30k("val.de.gz", 12)}
        ),
    )
    return tokenize_corpus(pairs, tokenizer, max_length=64)


def _trainer(path, tokenizer, corpus, **overrides):
    return make_trainer(path, tiny_model(tokenizer, dropout=0.1), tokenizer, corpus, **overrides)


@pytest.mark.parametrize("max_tokens", [400, None])
def test_the_updates_batches_are_split_and_their_target_tokens_counted(tmp_path, tokenizer, corpus, max_tokens):
    sources = set(corpus["train"]["source"])
    trainer = _trainer(tmp_path, tokenizer, corpus, subword_split=0.3, max_tokens=max_tokens)
    plain = _trainer(tmp_path, tokenizer, corpus, max_tokens=max_tokens)
    device = trainer.args.device
    batches, count = trainer.get_batch_samples(iter(trainer.get_train_dataloader()), 3, device)
    plain_batches, plain_count = plain.get_batch_samples(iter(plain.get_train_dataloader()), 3, device)
    assert len(batches) == 3
    assert int(count) == sum(int((b["labels"] != -100).sum()) for b in batches) > 1.05 * int(plain_count)
    for batch in batches:
        mask = batch["attention_mask"].bool()
        for row, row_mask in zip(batch["input_ids"], mask):
            assert tokenizer.decode(row[row_mask].tolist(), skip_special_tokens=True) in sources
        # Collated again: the decoder input is the new labels' (the collator's, given the model).
        shifted = trainer.model.prepare_decoder_input_ids_from_labels(batch["labels"])
        assert torch.equal(batch["decoder_input_ids"], shifted)
    # A batch splits the same way at the same (update, micro-batch), whatever the global random state.
    batch = plain_batches[0]
    torch.manual_seed(123)
    first = trainer._split_subwords(batch, 0)["input_ids"]
    torch.manual_seed(456)
    assert torch.equal(trainer._split_subwords(batch, 0)["input_ids"], first)
    assert not torch.equal(trainer._split_subwords(batch, 1)["input_ids"], first)
    trainer.state.global_step += 1
    assert not torch.equal(trainer._split_subwords(batch, 0)["input_ids"], first)


def test_evaluation_sees_the_sentences_whole(tmp_path, tokenizer, corpus):
    split = make_trainer(
        tmp_path, tiny_model(tokenizer), tokenizer, corpus, subword_split=0.5, predict_with_generate=False
    )
    plain = make_trainer(tmp_path, tiny_model(tokenizer), tokenizer, corpus, predict_with_generate=False)
    assert split.evaluate()["eval_loss"] == plain.evaluate()["eval_loss"]


def test_training_with_splitting_resumes_exactly(tmp_path, tokenizer, corpus):
    """The splits of an update depend on (seed, update, micro-batch), not on when the batch was fetched; and they
    matter: without them the same run trains otherwise."""
    check_option_resumes_exactly(
        tmp_path,
        lambda path, **settings: _trainer(path, tokenizer, corpus, max_tokens=1400, **settings),
        subword_split=0.2,
    )


def test_splitting_needs_a_tokenizer(tmp_path, tokenizer, corpus):
    args = VanillaTrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True, subword_split=0.1)
    with pytest.raises(ValueError, match="`subword_split` undoes the tokenizer's BPE merges.*pass `tokenizer`"):
        build_trainer(tiny_model(tokenizer), args, None, corpus["train"])
