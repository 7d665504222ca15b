"""What several test modules share: the real data, and a prelude for subprocesses that must not see this package."""

import gzip
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from itertools import islice
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parents[1]
# The first lines of Multi30k's files, in the repository (tests/data/multi30k/README.md says which): a clone alone
# runs the tests.
MULTI30K = Path(__file__).resolve().parent / "data" / "multi30k"
# The whole corpus, where the README clones it: only the slow tests that need every line read it, skipped without it.
MULTI30K_CLONE = ROOT / "multi30k" / "data" / "task1" / "raw"
needs_multi30k_clone = pytest.mark.skipif(
    not MULTI30K_CLONE.is_dir(),
    reason="needs all of Multi30k: git clone --depth 1 https://github.com/multi30k/dataset multi30k (README)",
)


def read_multi30k(name: str, stop: int | None = None, start: int = 0, directory: Path = MULTI30K) -> list[str]:
    """Lines `start:stop` of a Multi30k file such as "train.en.gz", without their line ends. Asking for more lines
    than the file has is an error: the sample is short, and a test must not run on fewer lines than it says."""
    with gzip.open(directory / name, "rt", encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in islice(handle, start, stop)]
    if stop is not None and len(lines) < stop - start:
        raise ValueError(f"{directory / name} has {start + len(lines)} lines, the test asks for {stop}")
    return lines


def write_multi30k_subset(directory: Path, sizes: dict[str, int], langs=("en", "de")) -> Path:
    """A Multi30k-shaped directory with the first lines of each split (gzipped, as the real files)."""
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in sizes.items():
        for lang in langs:
            with gzip.open(directory / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in read_multi30k(f"{split}.{lang}.gz", n))
    return directory


# Python code for the start of a subprocess script: `vanilla_transformer` cannot be imported there (a meta-path
# finder refuses it, since an editable install would otherwise find it), and the script checks that it cannot.
BLOCK_PACKAGE = textwrap.dedent(
    """
    import importlib.abc, sys
    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "vanilla_transformer" or name.startswith("vanilla_transformer."):
                raise ModuleNotFoundError(f"No module named {name!r} (blocked for this test)")
    sys.meta_path.insert(0, _Block())
    try:
        import vanilla_transformer
        raise SystemExit("vanilla_transformer is importable: the test would prove nothing")
    except ModuleNotFoundError:
        pass
    """
)


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment for a Python subprocess whose floats are compared with this session's. The session computes
    with one torch thread (conftest's `one_thread`), so the child must too: with another thread count, GEMMs and
    reductions sum in another order and results differ in the last bits (1e-6 seen), whatever `OMP_NUM_THREADS` the
    machine's environment has. Offline, as every test here."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **extra}


def run_to_end(argv: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`argv` (a launcher of several processes) run to its end in a session of its own, with `subprocess_env()`: after
    `timeout` seconds the launcher and the processes it started are killed together (a killed launcher alone would
    leave them holding their ports) and the test fails; so does an exit status other than 0."""
    started = time.perf_counter()
    process = subprocess.Popen(
        argv,
        cwd=cwd,
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        stdout, stderr = process.communicate()
        pytest.fail(f"still running after {timeout} s: {' '.join(argv[2:])}\n{stderr[-4000:]}")
    print(f"{time.perf_counter() - started:.1f} s: {' '.join(argv[2:])}")
    assert process.returncode == 0, stderr[-4000:]
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


# ---- commands that refuse before loading (issue 51): tests/test_fail_fast.py, tests/test_train_fail_fast.py


HEAVY = ("torch", "transformers")  # what a command must not import before it refuses its options


class Loaded(AssertionError):
    """Raised by a test's stand-in for loading: the command began loading before it refused its options."""


def snapshot(directory: Path) -> dict[str, int]:
    """Every path below `directory` with its size: equal before and after a command that wrote nothing."""
    return {str(path.relative_to(directory)): path.stat().st_size for path in sorted(directory.rglob("*"))}


def run_command(argv: list[str], capsys) -> tuple[int, str]:
    """(exit status, stderr) of `vanilla-transformer ARGV` run in this process."""
    from vanilla_transformer.commands import main

    try:
        status = main(argv)
    except SystemExit as exit_info:
        status = exit_info.code
    return status, capsys.readouterr().err


def assert_refused_in_one_line(status: int, err: str, argv: list[str], flag: str, message: str) -> None:
    """Exit status 2 and one line of stderr, the command's own error naming `flag` and saying `message`."""
    assert status == 2, err
    command = " ".join(argv[:2] if argv[0] == "export" else argv[:1])  # `export` has its formats as subcommands
    assert err.count("\n") == 1 and err.startswith(f"vanilla-transformer {command}: error: "), err
    assert flag in err and message in err, err


def assert_refused_without_torch(argv: list[str], flag: str, message: str, **run_options) -> None:
    """`vanilla-transformer ARGV` in a new process exits 2 with one line naming `flag` and saying `message`, without
    importing torch or transformers (`python -X importtime`). `run_options`: `subprocess.run`'s cwd and env."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vanilla_transformer_cli", *argv],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=120,
        **run_options,
    )
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import")}
    errors = [line for line in result.stderr.splitlines() if not line.startswith("import")]
    assert result.returncode == 2 and len(errors) == 1, (argv, errors)
    assert flag in errors[0] and message in errors[0], errors
    heavy = sorted(name for name in imported if name.split(".")[0] in HEAVY)
    assert heavy == [], (argv, heavy[:5])


def assert_row_refused_before_loading(row: tuple[list[str], str, str], tmp_path: Path, capsys) -> None:
    """One row of a fail-fast table (argv, the flag the error names, what it says: tests/test_fail_fast.py,
    tests/test_train_fail_fast.py), run in this process while loading fails the test (the module's `nothing_loads`):
    refused in one line, and nothing written below `tmp_path`."""
    argv, flag, message = row
    before = snapshot(tmp_path)
    status, err = run_command(argv, capsys)
    assert_refused_in_one_line(status, err, argv, flag, message)
    assert snapshot(tmp_path) == before  # nothing written


def assert_rows_refused_without_torch(rows: list[tuple[list[str], str, str]], **run_options) -> None:
    """Every row of a fail-fast table in a new process: refused in one line without importing torch or transformers
    (`assert_refused_without_torch`; `run_options`: `subprocess.run`'s cwd and env)."""
    for argv, flag, message in rows:
        assert_refused_without_torch(argv, flag, message, **run_options)


# --- the shipped models' figures, as README.md's and model_cards/README.md's tables print them

PRECISION = {"no": "float32", "bf16": "bfloat16", "fp16": "float16"}  # results.json's `mixed_precision`, in words


def shipped_results(name: str) -> dict:
    """The results.json of the shipped model `name`."""
    from vanilla_transformer.translation.shipped import PRETRAINED_DIR

    return json.loads((PRETRAINED_DIR / name / "results.json").read_text())


def figure_cells(results: dict) -> str:
    """The cells both tables give a shipped model: test and validation BLEU (cased / lowercased), the machine and
    precision it trained in, its updates and minutes."""
    bleu, training = results["bleu"], results["training"]
    return (
        f"| {bleu['test']['score']:.2f} / {bleu['test']['lowercase']['score']:.2f} "
        f"| {bleu['validation']['score']:.2f} / {bleu['validation']['lowercase']['score']:.2f} "
        f"| {training['hardware']}: {PRECISION[training['precision']['mixed_precision']]} "
        f"| {training['steps']:,} | {training['train_runtime_s'] / 60:.0f} "
    )


# The sizes of the tiny model the tests build: section 3's architecture (3.1's two stacks, 3.2.2's heads, 3.3's
# feed-forward layer) at 1 layer each side, d_model 32, 2 heads, d_ff 64, small enough to train in seconds on a CPU.
# A test that needs other sizes overrides them by name, where a reader sees them.
TINY_SIZES = dict(
    d_model=32,
    encoder_layers=1,
    decoder_layers=1,
    encoder_attention_heads=2,
    decoder_attention_heads=2,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
)


def tiny_config(**overrides):
    """A VanillaTransformerConfig of TINY_SIZES, with `overrides` (vocab_size, dropout, a test's own sizes) on top."""
    from vanilla_transformer import VanillaTransformerConfig

    return VanillaTransformerConfig(**{**TINY_SIZES, **overrides})


def tiny_options(**overrides) -> list[str]:
    """TINY_SIZES as the train command's options (`--layers`, `--heads`, `--ffn_dim` set both stacks), then
    `overrides` by option name: `tiny_options(vocab_size=400)` ends with `--vocab_size 400`."""
    options = {
        "d_model": TINY_SIZES["d_model"],
        "layers": TINY_SIZES["encoder_layers"],
        "heads": TINY_SIZES["encoder_attention_heads"],
        "ffn_dim": TINY_SIZES["encoder_ffn_dim"],
        **overrides,
    }
    return [text for name, value in options.items() for text in (f"--{name}", str(value))]


def train_steps(model, tokenizer, source: list[str], target: list[str], steps: int, seed: int):
    """`steps` Adam updates (lr 3e-3, the paper's betas) on random batches of 32 of the given pairs: a tiny model that
    has learnt something (ends some translations with </s>). Returns the model in eval mode."""
    import torch

    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(source), (32,), generator=generator).tolist()
        batch = tokenizer(
            [source[i] for i in rows],
            text_target=[target[i] for i in rows],
            padding=True,
            truncation=True,
            return_tensors="pt",
        )
        labels = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
        model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return model.eval()
