"""Short time-limited runs (issue 58): the warm-up is fitted to the speed measured in the run, a resumed run keeps it
(so that "train longer" is accepted as printed), and a run without evaluation or test split still writes its card,
plots and averaged model, and says whether it could have learned."""

import itertools
import json
import logging
import random
from pathlib import Path

import pytest
from helpers import tiny_options

from vanilla_transformer.training import callbacks, train
from vanilla_transformer.training.report import learning_verdict
from vanilla_transformer.training.schedule import warmup_for_speed


@pytest.mark.parametrize(
    "done, per_second, seconds_left, max_steps, expected, warmup",
    [
        (3, 1 / 6, 222, 100_000, 40, 10),  # the busy 2-core CPU: 40 updates in 4 minutes, a quarter of them
        (21, 1.6, 3587, 100_000, 5_760, 800),  # the bf16 hour on the recipe's machine: the recipe's 800 stays
        (21, 1.6, 227, 100_000, 384, 96),  # 4 minutes there
        (21, 1.6, 3587, 30, 30, 8),  # a --max_steps ceiling below the time limit's updates
        (2, 0.0, 100, 100_000, 2, 1),  # at least one update
    ],
)
def test_the_warm_up_is_a_quarter_of_the_updates_the_measured_speed_gives_at_most_the_recipes(
    done, per_second, seconds_left, max_steps, expected, warmup
):
    assert warmup_for_speed(800, done, per_second, seconds_left, max_steps) == (warmup, expected)


# A toy language pair: each source word has one target word, in the same order. Written into the test's directory
# (tests read nothing outside the repository).
WORDS = {f"w{i}": f"v{i}" for i in range(40)}


def _write_tables(directory: Path, sizes: dict[str, int]) -> Path:
    directory.mkdir()
    rng = random.Random(0)
    for split, n in sizes.items():
        rows = ["english\tgerman"]
        for _ in range(n):
            words = rng.choices(list(WORDS), k=rng.randint(3, 8))
            rows.append(" ".join(words) + "\t" + " ".join(WORDS[w] for w in words))
        (directory / f"{split}.tsv").write_text("\n".join(rows) + "\n", "utf-8")
    return directory


class SlowTimeLimit(callbacks.TimeLimit):
    """A TimeLimit whose clock advances 3 seconds per reading: one update takes 3 s, a 1-minute limit holds 20."""

    def __init__(self, minutes):
        super().__init__(minutes, clock=itertools.count(0, 3).__next__)


def test_a_short_run_fits_its_warm_up_to_its_speed_and_writes_everything_without_evaluation_or_test_split(
    tmp_path, monkeypatch, caplog
):
    """The README's own-data command on a 1-minute limit whose updates take 3 s each (a slow machine: 20 updates),
    without evaluation and without a test split. The warm-up, the recipe's 800 updates until the speed is measured
    after update 3, becomes a quarter of the 20 updates it measures (5), with the lr_factor that keeps the peak; the run
    ends past it and writes its model card, plots, averaged model and results.json, whose verdict (could it have
    learned, from its validation loss since no BLEU was measured) is also its last log line. Then "train longer" as
    the verdict prints it (the same command with --resume_from_checkpoint true) is accepted: the resumed run keeps the
    warm-up, drops the cool-down the first run planned, makes 20 more updates and plans its own."""
    monkeypatch.setattr(callbacks, "TimeLimit", SlowTimeLimit)
    monkeypatch.chdir(tmp_path)
    data = _write_tables(tmp_path / "toy", {"train": 300, "dev": 20})
    argv = [
        *("--dataset", str(data), "--src_lang", "en", "--tgt_lang", "de", "--src_column", "english"),
        *("--tgt_column", "german", "--train_split", "train", "--validation_split", "dev", "--test_split", ""),
        *("--output_dir", "run", "--max_train_minutes", "1", "--eval_strategy", "no"),
        *tiny_options(vocab_size=300),
        *("--max_tokens", "256", "--save_steps", "2", "--logging_steps", "2", "--report_to", "none"),
        *("--average_last", "3", "--num_beams", "2"),
    ]
    with caplog.at_level(logging.INFO):
        results = train.train(argv)
    run = tmp_path / "run"
    training = results["training"]
    fitted = training["recipe"]["warmup_fitted"]
    assert fitted["warmup_steps"] == [800, 5] and fitted["measured_updates"] == [2, 3]
    assert fitted["updates_per_second"] == pytest.approx(1 / 3, rel=1e-3) and fitted["expected_updates"] == 20
    factor = fitted["lr_factor"][1]
    assert fitted["lr_factor"][0] == 0.7 and factor == pytest.approx(0.7 * (5 / 800) ** 0.5, rel=1e-5)
    assert (training["hyperparameters"]["warmup_steps"], training["hyperparameters"]["lr_factor"]) == (5, factor)
    assert training["steps"] == 20 and training["steps"] > 5
    # Written without a single BLEU: the card, the plots, the averaged model (the cool-down's checkpoints).
    assert results["bleu"] == {} and not any(
        "eval_bleu" in h for h in json.loads((run / "trainer_state.json").read_text())["log_history"]
    )
    assert {"loss.png", "learning_rate.png"} <= set(results["plots"]) and all(
        (run / p).is_file() for p in results["plots"]
    )
    averaged = json.loads((run / "averaged" / "results.json").read_text())
    assert averaged["checkpoint_averaging"]["checkpoints"] == ["checkpoint-18", "checkpoint-20"]  # the cool-down's
    # The limit bounds the training; the run says so at its start, and records its whole time apart (issue 68).
    assert 0 < training["train_runtime_s"] <= training["wall_time_s"] == averaged["training"]["wall_time_s"]
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Time limit: training stops by ")]
    assert len(said) == 1 and "outside the limit: the averaging and the figures (its time not estimated" in said[0]
    assert averaged["bleu"] == {}
    assert (run / "averaged" / "model.safetensors").is_file() and (run / "averaged" / "README.md").is_file()
    # Whether it could have learned: in results.json, the card and the last log line.
    for folder, scored in ((run, results), (run / "averaged", averaged)):
        learning = scored["learning"]
        assert set(learning) == {"could_have_learned", "line", "validation_nll", "unigram_nll"}
        assert learning["could_have_learned"] == (learning["validation_nll"] < learning["unigram_nll"])
        assert scored["warnings"] == ([] if learning["could_have_learned"] else [learning["line"]])
        assert "after 20 updates, past its learning-rate warm-up of 5" in learning["line"]
        card = (folder / "README.md").read_text()
        assert "No BLEU was measured" in card and learning["line"] in card
    ours = [r for r in caplog.records if r.name.startswith("vanilla_transformer")]
    assert ours[-1].getMessage() == results["learning"]["line"]
    assert json.loads((run / "results.json").read_text())["learning"] == results["learning"]

    # "Train longer" as printed: the same command with --resume_from_checkpoint true.
    caplog.clear()
    with caplog.at_level(logging.INFO):
        resumed = train.train([*argv, "--resume_from_checkpoint", "true"])
    training = resumed["training"]
    assert training["recipe"]["warmup_fitted"] == {
        "warmup_steps": [800, 5],
        "lr_factor": [0.7, factor],
        "kept_from": "checkpoint-20",
    }
    assert (training["hyperparameters"]["warmup_steps"], training["hyperparameters"]["lr_factor"]) == (5, factor)
    assert training["steps"] == 40
    start, end = training["hyperparameters"]["lr_cooldown_updates"]
    assert 20 < start < end <= 40  # its own cool-down, at the end of its own limit
    history = json.loads((run / "trainer_state.json").read_text())["log_history"]
    rates = {h["step"]: h["learning_rate"] for h in history if "learning_rate" in h}
    assert rates[22] > rates[20]  # back to the paper's schedule after the first run's cool-down
    assert any("cool-down planned by the earlier run" in r.getMessage() for r in caplog.records)


def test_a_corpus_of_one_split_trains_with_validation_split_empty(tmp_path, monkeypatch):
    """`--validation_split ''` means no validation, as `--test_split ''` means no test (issue 68): the run does not
    evaluate, and writes its model, card and figure (of a training sentence)."""
    monkeypatch.chdir(tmp_path)
    data = _write_tables(tmp_path / "toy", {"train": 60})
    argv = [
        *("--dataset", str(data), "--src_lang", "en", "--tgt_lang", "de", "--src_column", "english"),
        *("--tgt_column", "german", "--validation_split", "", "--test_split", "", "--output_dir", "run"),
        *tiny_options(vocab_size=300),
        *("--max_steps", "2", "--save_steps", "2", "--report_to", "none", "--max_train_minutes", "none"),
    ]
    results = train.train(argv)
    history = json.loads((tmp_path / "run" / "trainer_state.json").read_text())["log_history"]
    assert results["training"]["steps"] == 2 and not any("eval_loss" in h for h in history)
    assert results["bleu"] == {} and (tmp_path / "run" / "README.md").is_file()
    assert "no BLEU or loss was measured" in results["learning"]["line"]


def test_a_timed_run_says_when_it_ends_once_an_evaluation_has_measured_the_speed(caplog):
    """`RunEnd`: the training's deadline at the start; at the first evaluation (100 sentences in 20 s: 5 per second),
    the end of the run: the deadline, then the last validation (20 s) and 2 x 500 test sentences (200 s)."""
    from types import SimpleNamespace

    now = [1000.0]
    end = callbacks.RunEnd(10, validation=100, test=500, models=2, evaluates=True, clock=lambda: now[0])
    state, control = SimpleNamespace(is_world_process_zero=True), SimpleNamespace(should_training_stop=False)
    with caplog.at_level(logging.INFO):
        end.on_train_begin(None, state, control)
        assert end.deadline == 1600.0
        now[0] = 1100.0
        end.on_evaluate(None, state, control, metrics={"eval_runtime": 20.0})
        assert end.estimated == 1600.0 + 20.0 + 200.0
        end.on_evaluate(None, state, control, metrics={"eval_runtime": 40.0})  # said once
        assert end.estimated == 1820.0
    said = [r.getMessage() for r in caplog.records]
    assert "the test translation of 500 sentences by the final and the averaged model" in said[0], said
    assert len(said) == 2 and "then about 3.7 minutes for the last validation and 2 test translations" in said[1]
    stopping = callbacks.RunEnd(10, validation=100, test=500, models=1, evaluates=True, clock=lambda: now[0])
    stopping.on_train_begin(None, state, control)
    now[0] = 2000.0  # the first evaluation comes at the stop: only the test translation follows
    stopping.on_evaluate(None, state, control, metrics={"eval_runtime": 20.0})
    assert stopping.estimated == 2000.0 + 100.0


class _Trainer:
    """What `learning_verdict` reads of a trainer that ran a time limit."""

    def __init__(self, steps, warmup, bleu=()):
        from types import SimpleNamespace

        self.state = SimpleNamespace(
            global_step=steps, max_steps=100_000, log_history=[{"eval_bleu": b} for b in bleu]
        )
        self.args = SimpleNamespace(max_steps=100_000)
        self.lr_scheduler = SimpleNamespace(warmup_steps=warmup)
        self.callback_handler = SimpleNamespace(callbacks=[callbacks.TimeLimit(4)])


def test_the_verdict_of_a_timed_run_tells_to_resume_it_to_train_longer():
    learned, line = learning_verdict(_Trainer(40, 53), {"score": 0.3})
    assert not learned and line.startswith("Not a usable model: training stopped after 40 updates, inside its ")
    assert "the same command with --resume_from_checkpoint true continues it" in line
    learned, line = learning_verdict(_Trainer(400, 53, bleu=[0.5]), None)
    assert not learned and "--resume_from_checkpoint true" in line and "validation BLEU 0.50" in line
    learned, line = learning_verdict(_Trainer(400, 53, bleu=[12.5]), {"score": 11.0})
    assert learned and line == (
        "Could have learned: after 400 updates, past its learning-rate warm-up of 53, validation BLEU 12.50 and "
        "test BLEU 11.00."
    )
    learned, line = learning_verdict(_Trainer(400, 53), None, nll=6.5, unigram=5.9)
    assert not learned and "validation loss of 6.50 per target token, against 5.90" in line
    learned, line = learning_verdict(_Trainer(400, 53), None, nll=3.1, unigram=5.9)
    assert learned and "no BLEU was measured" in line
    learned, line = learning_verdict(_Trainer(1, 53), None)
    assert line.startswith("Not a usable model: training stopped after 1 update, inside")  # one update, singular
