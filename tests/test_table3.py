"""`vanilla-transformer table3`: the paper's Table 3 rows scaled to a recipe's model, each a `train` run; the command
resumes after a stop without training a finished run again, and writes the table an uninterrupted run writes."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import subprocess_env, write_multi30k_subset

from vanilla_transformer.checkpoints import is_complete_checkpoint
from vanilla_transformer.commands import main
from vanilla_transformer.configuration_vanilla_transformer import PRESETS, TABLE3_LABEL_SMOOTHING, TABLE3_ROWS
from vanilla_transformer.training import table3
from vanilla_transformer.training.preflight import read_recipe


RECIPES = Path(table3.__file__).parent / "recipes"


def test_the_rows_are_read_from_the_config_file_without_importing_it():
    assert table3.paper_rows() == (PRESETS, TABLE3_ROWS, TABLE3_LABEL_SMOOTHING)


def test_each_variation_is_the_papers_change_scaled_to_the_recipes_model():
    """The Multi30k recipe's small model (N 3, d_model 256, h 4, d_ff 1024, P_drop 0.15, eps_ls 0.2; in float32
    P_drop 0.1): every row's recipe changes what the paper's row changes, by the paper's ratio."""
    recipe, cpu_float32 = read_recipe(
        "multi30k_en_de_cpu", set(json.loads((RECIPES / "multi30k_en_de_cpu.json").read_text()))
    )
    changes = {}
    for name in table3.row_names(["A", "B", "C", "D", "E", "big"]):
        row = table3.row_recipe(recipe, cpu_float32, name)
        assert {
            key: row[key] for key in recipe if key not in table3.OPTION_FIELDS and key != "label_smoothing_factor"
        } == {
            key: value
            for key, value in recipe.items()
            if key not in table3.OPTION_FIELDS and key != "label_smoothing_factor"
        }
        changes[name] = {key: value for key, value in row.items() if key != "cpu_float32" and recipe.get(key) != value}
        changes[name].update({f"float32 {k}": v for k, v in row["cpu_float32"].items() if cpu_float32[k] != v})
    assert changes == {
        "base": {},
        **{"A1": {"heads": 1}, "A2": {"heads": 2}, "A3": {"heads": 8}, "A4": {"heads": 16}},
        **{"B1": {"qk_head_dim": 16}, "B2": {"qk_head_dim": 32}},
        **{f"C{i}": {"encoder_layers": n, "decoder_layers": n} for i, n in ((1, 1), (2, 2), (3, 4))},
        **{"C4": {"d_model": 128}, "C5": {"d_model": 512}, "C6": {"ffn_dim": 512}, "C7": {"ffn_dim": 2048}},
        "D1": {"dropout": 0.0, "float32 dropout": 0.0},
        "D2": {"dropout": 0.3, "float32 dropout": 0.2},
        "D3": {"label_smoothing_factor": 0.0},
        "D4": {"label_smoothing_factor": 0.4},
        "E": {"position_embedding_type": "learned"},
        "big": {"d_model": 512, "heads": 8, "ffn_dim": 2048, "dropout": 0.45, "float32 dropout": 0.3},
    }


def _recipe(tmp_path: Path, **changes) -> Path:
    """The Multi30k recipe on a slice of Multi30k with a tiny model: a few updates train and score in seconds."""
    recipe = json.loads((RECIPES / "multi30k_en_de_cpu.json").read_text())
    data = write_multi30k_subset(tmp_path / "data", {"train": 300, "val": 12, "test_2016_flickr": 12})
    recipe.update(dataset=str(data), vocab_size=300, d_model=32, layers=1, heads=2, ffn_dim=64, max_tokens=512)
    recipe.update(num_beams=1, average_last=0, plots=False, report_to=["none"], save_steps=1000, bf16="false")
    recipe.update(subword_split=0.0, per_device_eval_batch_size=12, **changes)
    del recipe["cpu_float32"]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(recipe))
    return path


@pytest.mark.parametrize(
    "changes, options, message",
    [
        ({}, ["--rows", "F"], "--rows 'F' is no group or row of Table 3"),
        ({}, ["--max_steps", "2", "--max_train_minutes", "3"], "give --max_steps N (the same updates for every row)"),
        ({}, ["--max_train_minutes", "0"], "--max_train_minutes must be above 0"),
        # d_model 36 with 4 heads (d_k 9): row A3's 8 heads do not divide it.
        ({"d_model": 36, "heads": 4}, ["--rows", "A"], "row A3 cannot be built: d_model 36 is not divisible by its 8"),
        ({"dataset": "no/such/dir"}, [], "--dataset"),
    ],
)
def test_mistakes_are_one_line_before_anything_is_written(changes, options, message, tmp_path, capsys):
    out = tmp_path / "table"
    budget = [] if any(o.startswith("--max") for o in options) else ["--max_steps", "2"]
    status = main(
        ["table3", "--recipe", str(_recipe(tmp_path, **changes)), "--output_dir", str(out), *budget, *options]
    )
    error = capsys.readouterr().err.strip()
    assert status == 2 and len(error.splitlines()) == 1 and message in error, error
    assert not out.exists()


def _table3(recipe: Path, out: Path, *extra) -> list[str]:
    return [sys.executable, "-m", "vanilla_transformer_cli", "table3", "--recipe", str(recipe), "--rows", "D1"] + [
        *("--seeds", "1", "--max_steps", "3", "--output_dir", str(out), *extra)
    ]


def _without_minutes(out: Path) -> tuple[list[dict], list[str]]:
    rows = [json.loads(line) for line in (out / "table3.jsonl").read_text().splitlines()]
    for row in rows:
        row.pop("minutes")
        for seed in row["seeds"]:
            seed.pop("minutes")
    lines = (out / "table3.md").read_text().splitlines()
    minutes = lines[5].split(" | ").index("minutes")
    return rows, [" | ".join(c for i, c in enumerate(line.split(" | ")) if i != minutes) for line in lines[5:]]


def test_a_stopped_table_resumes_without_training_a_finished_run_again(tmp_path):
    """Stopped (killed) once the base row has finished and D1 has saved its first checkpoint: the same command trains
    neither base again nor D1 from its start, and writes the table of a run never stopped."""
    recipe, env = _recipe(tmp_path, save_steps=1), subprocess_env(OMP_NUM_THREADS="1")
    whole = tmp_path / "whole"
    subprocess.run(_table3(recipe, whole), env=env, check=True, capture_output=True, text=True, timeout=300)
    stopped = tmp_path / "stopped"
    process = subprocess.Popen(
        _table3(recipe, stopped), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 240
        while not (stopped / "base" / "seed-1" / "results.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.2)
        while not is_complete_checkpoint(stopped / "D1" / "seed-1" / "checkpoint-1") and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not (stopped / "D1" / "seed-1" / "results.json").exists()
    base_written = (stopped / "base" / "seed-1" / "results.json").stat().st_mtime_ns
    resumed = subprocess.run(
        _table3(recipe, stopped), env=env, check=True, capture_output=True, text=True, timeout=300
    )
    assert "table3: base seed 1: finished before, not trained again" in resumed.stdout
    assert "table3: D1 seed 1: going on from checkpoint-" in resumed.stdout, resumed.stdout
    assert (stopped / "base" / "seed-1" / "results.json").stat().st_mtime_ns == base_written
    training = json.loads((stopped / "D1" / "seed-1" / "results.json").read_text())["training"]
    assert training["resumed"]["from_update"] in (1, 2) and training["resumed"]["seconds_before"] > 0
    assert training["train_runtime_s"] >= training["resumed"]["seconds_before"]
    assert _without_minutes(stopped) == _without_minutes(whole)
    rows, lines = _without_minutes(whole)
    assert [row["row"] for row in rows] == ["base", "D1"] and rows[1]["changed"] == {"dropout": 0.0}
    assert all(row["budget"] == {"max_steps": 3} and row["updates"]["mean"] == 3 for row in rows)
    assert rows[0]["test_bleu"]["mean"] is not None and rows[0]["validation_perplexity"]["mean"] > 1
    # Another budget is never mixed into the table.
    other = subprocess.run(_table3(recipe, whole, "--max_steps", "4"), env=env, capture_output=True, text=True)
    assert other.returncode == 2 and "holds a table of --max_steps 3, not --max_steps 4" in other.stderr


@pytest.mark.parametrize(
    "checkpoint, budget, goes_on",
    [
        ("complete", {"max_steps": 5}, True),
        ("complete", {"max_train_minutes": 3}, False),  # a timed run resumed would train its minutes again
        ("weights only", {"max_steps": 5}, False),  # no optimizer state: resuming would start a fresh Adam
        ("unfinished save", {"max_steps": 5}, False),
        (None, {"max_steps": 5}, False),
    ],
)
def test_a_stopped_run_goes_on_from_its_checkpoint_or_starts_again(checkpoint, budget, goes_on, tmp_path, monkeypatch):
    commands = []

    def train(command, **kwargs):  # what `train` leaves: its results
        commands.append(command)
        table3.run_dir(tmp_path, "D1", 1).mkdir(exist_ok=True)
        (table3.run_dir(tmp_path, "D1", 1) / "results.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(table3.subprocess, "run", train)
    directory = table3.run_dir(tmp_path, "D1", 1)
    (directory / "tokenizer").mkdir(parents=True)
    if checkpoint:
        (directory / "checkpoint-2").mkdir()
        if checkpoint != "unfinished save":
            (directory / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
        if checkpoint == "complete":
            (directory / "checkpoint-2" / "optimizer.pt").write_bytes(b"")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "D1-seed-1.log").write_text("the stopped run's log\n")
    table3.train_row(tmp_path, "D1", 1, budget, threads=1)
    assert len(commands) == 1 and commands[0][:3] == [sys.executable, "-m", "vanilla_transformer_cli"]
    assert (commands[0][-2:] == ["--resume_from_checkpoint", "true"]) == goes_on
    assert (directory / "tokenizer").is_dir() == goes_on  # otherwise the stopped run's files are gone
    assert (tmp_path / "logs" / "D1-seed-1.log").read_text().startswith("the stopped run's log") == goes_on


def test_a_row_trained_with_more_seeds_before_keeps_them(tmp_path):
    """`--rows base --seeds 3`, then the variations with `--seeds 2` in the same directory: the base row's line has
    its three seeds, D1's its two; a row missing one of seeds 1-2 has no line."""

    def finished(name: str, seed: int, bleu: float) -> None:
        directory = table3.run_dir(tmp_path, name, seed)
        directory.mkdir(parents=True)
        training = {"steps": 5, "train_runtime_s": 60.0, "hardware": "a CPU", "precision": {"mixed_precision": "no"}}
        results = {"num_parameters": 1000, "training": training, "bleu": {"test": {"score": bleu}}}
        (directory / "results.json").write_text(json.dumps(results))
        history = [{"eval_nll_loss": 1.0, "eval_bleu": bleu - 1}]
        (directory / "trainer_state.json").write_text(json.dumps({"log_history": history}))

    for seed, bleu in ((1, 30.0), (2, 31.0), (3, 35.0)):
        finished("base", seed, bleu)
    for seed, bleu in ((1, 28.0), (2, 29.0)):
        finished("D1", seed, bleu)
    finished("D2", 2, 20.0)  # seed 1 missing
    recipe, _ = read_recipe("multi30k_en_de_cpu", set(json.loads((RECIPES / "multi30k_en_de_cpu.json").read_text())))
    base = table3.base_values(recipe)
    work = {"out": tmp_path, "names": ["base", "D1", "D2"], "seeds": 2}
    rows = {row["row"]: row for row in table3.table_rows(work, base)}
    assert set(rows) == {"base", "D1"}
    assert [run["seed"] for run in rows["base"]["seeds"]] == [1, 2, 3] and rows["base"]["test_bleu"]["mean"] == 32.0
    assert [run["seed"] for run in rows["D1"]["seeds"]] == [1, 2] and rows["D1"]["test_bleu"]["mean"] == 28.5
    work["manifest"] = {"recipe": {"name": "multi30k_en_de_cpu"}, "budget": {"max_steps": 5}}
    table3.write_table(work, list(rows.values()), base)
    lines = (tmp_path / "table3.md").read_text().splitlines()
    assert lines[-2].startswith("| base | 3 | 3 | 256 |") and lines[-1].startswith("| D1 | 2 | ")


def test_a_row_whose_train_fails_ends_the_command_in_one_line_naming_it(tmp_path, capsys, monkeypatch):
    """A run that fails (here a `train` that exits 3) stops the table with one line naming the row and its log."""
    monkeypatch.setattr(table3, "train_command", lambda *args: [sys.executable, "-c", "raise SystemExit(3)"])
    out = tmp_path / "table"
    status = main(
        ["table3", "--recipe", str(_recipe(tmp_path)), "--rows", "D1", "--max_steps", "2", "--output_dir", str(out)]
    )
    error = capsys.readouterr().err.strip()
    assert status == 1 and len(error.splitlines()) == 1, error
    assert "row base seed 1: train exited with status 3" in error and str(out / "logs") in error, error
