"""Several processes and machines (docs/distributed.md): a launch runs the processes it asks for, logs once, and two
"machines" on loopback train the weights of one machine with two processes; checkpoints resume on another topology.

The launches here are the package's own command under `accelerate launch`, as docs/distributed.md gives them, with
gloo on the CPU. Every subprocess is bounded in time: a hang fails the test instead of stalling the run."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
import torch
from helpers import read_multi30k, run_to_end, subprocess_env, tiny_options, write_multi30k_subset
from safetensors.torch import load_file

from vanilla_transformer import shipped_model_path
from vanilla_transformer.training import train as command


ROOT = Path(__file__).resolve().parents[1]
TIMEOUT = 300  # seconds for one launch; each takes 10-30 s on a shared 2-core CPU
LAUNCH = [sys.executable, "-m", "accelerate.commands.launch", "--mixed_precision", "no", "--dynamo_backend", "no"]
TRAIN = ["-m", "vanilla_transformer.training.train"]


# ---- the launch check and the logging: cheap, in the default run


README_LAUNCH = ["/usr/bin/python3", "/venv/bin/accelerate", "launch", "--num_processes", "2", *TRAIN, "--recipe", "r"]
# What accelerate's plain launcher gives the process it starts when --num_processes 2 has no --multi_gpu.
PLAIN_LAUNCHER = {"ACCELERATE_USE_CPU": "False", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


def test_a_launch_that_started_one_process_of_several_is_started_again_with_multi_gpu(monkeypatch):
    """`accelerate launch --num_processes 2` without --multi_gpu starts one process on a machine without GPUs: the
    command starts the launch again with --multi_gpu (torchrun: two gloo processes), `--cpu` dropped (it would refuse
    --multi_gpu), instead of training alone."""
    execs = []
    monkeypatch.setattr(os, "execv", lambda path, args: execs.append(args))
    # The relaunch marks its environment (for the launch it starts); a copy keeps the mark out of this session's.
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != command.RELAUNCHED})
    command.relaunch_if_alone(PLAIN_LAUNCHER, README_LAUNCH)
    assert execs == [[sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", *README_LAUNCH[3:]]]
    assert os.environ.pop(command.RELAUNCHED) == "1"
    with_cpu = [sys.executable, "-m", "accelerate.commands.launch", "--cpu", "--num_processes", "3", "train.py"]
    command.relaunch_if_alone(PLAIN_LAUNCHER, with_cpu)
    assert execs[-1][3:] == ["--multi_gpu", "--num_processes", "3", "train.py"]

    # Launches that got what they asked for run on: one process without a launcher, accelerate's plain launcher
    # asked for one process (no MASTER_PORT), a process of torchrun (WORLD_SIZE).
    for environ in ({}, {"ACCELERATE_USE_CPU": "False"}, {**PLAIN_LAUNCHER, "WORLD_SIZE": "2", "RANK": "1"}):
        command.relaunch_if_alone(environ, README_LAUNCH)
    assert len(execs) == 2


@pytest.mark.parametrize("parent", [[], README_LAUNCH], ids=["launch unknown", "relaunched already"])
def test_a_launch_that_cannot_be_started_again_stops_with_the_command_that_works(monkeypatch, parent):
    monkeypatch.setattr(os, "execv", lambda path, args: pytest.fail("started again"))
    environ = {**PLAIN_LAUNCHER, command.RELAUNCHED: "1"} if parent else PLAIN_LAUNCHER
    with pytest.raises(ValueError, match="accelerate launch --multi_gpu --num_processes 2 -m vanilla_transformer"):
        command.relaunch_if_alone(environ, parent)


QUIET_SCRIPT = """
import logging, sys, warnings
from vanilla_transformer import shipped_model_path
from vanilla_transformer.training import train as command
command.quiet_unless_main({"RANK": sys.argv[1]} if sys.argv[1] else {})
logging.getLogger("vanilla_transformer.training.x").info("an event")
logging.getLogger("vanilla_transformer.training.x").warning("a warning")
warnings.warn("a Python warning")
logging.getLogger("vanilla_transformer.training.x").error("an error")
"""


@pytest.mark.parametrize("rank", ["0", "1"])
def test_only_the_main_process_logs_events_and_warnings(rank):
    """Every process of a launch runs the same steps: the main process (rank 0, or no launcher) logs them, the others
    only their errors, so that each line appears once."""
    result = subprocess.run(
        [sys.executable, "-c", QUIET_SCRIPT, rank], capture_output=True, text=True, timeout=120, env=subprocess_env()
    )
    assert result.returncode == 0, result.stderr
    said = [text for text in ("an event", "a warning", "a Python warning", "an error") if text in result.stderr]
    assert said == (["an error"] if rank == "1" else ["an event", "a warning", "a Python warning", "an error"])


@pytest.mark.parametrize(("launcher", "bf16", "trains_in"), [("bf16", "false", "no"), ("fp16", "true", "bf16")])
def test_the_runs_precision_wins_over_the_launchers(monkeypatch, caplog, launcher, bf16, trains_in, tmp_path):
    """accelerate launch --mixed_precision (a launch config's `mixed_precision`) reaches the Trainer as
    ACCELERATE_MIXED_PRECISION: the run's --bf16/--fp16 decide, and the log says that the launcher's is not used."""
    from vanilla_transformer.training.options import parse_args

    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", launcher)
    args = ["--dataset", str(tmp_path), "--output_dir", str(tmp_path / "run"), "--bf16", bf16]
    training_args = parse_args(args)[-1]
    assert training_args.mixed_precision == trains_in
    assert f"--mixed_precision {launcher} is not used" in caplog.text


# ---- real launches: two loopback "machines", one machine with two processes, one process accumulating two batches


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def options(data_dir: Path, out: Path, *extra: str) -> list[str]:
    """A tiny model, 6 updates, a checkpoint every 3, no dropout (the runs compare numbers), float32."""
    return [
        "--dataset",
        str(data_dir),
        "--output_dir",
        str(out),
        *tiny_options(vocab_size=300),
        "--max_tokens",
        "512",
        "--max_steps",
        "6",
        "--save_steps",
        "3",
        "--keep_checkpoints",
        "all",
        "--logging_steps",
        "1",
        "--dropout",
        "0.0",
        "--eval_strategy",
        "no",
        "--test_split",
        "",
        "--plots",
        "false",
        "--report_to",
        "none",
        "--max_train_minutes",
        "none",
        "--warmup_steps",
        "4",
        "--lr_factor",
        "0.05",
        "--lr_cooldown",
        "0",
        "--bf16",
        "false",
        "--seed",
        "3",
        *extra,
    ]


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return run_to_end(argv, TIMEOUT, cwd=ROOT)


def two_machines(log_dir: Path, *train_args: str, ranks=(0, 1), launch=()) -> list[subprocess.Popen]:
    """Two loopback machines of one process each, started: machine 0 listens on 127.0.0.1, machine 1 joins it.
    Each one's output goes to LOG_DIR/machine-RANK.log."""
    port = str(free_port())
    machines = []
    for index, rank in enumerate(ranks):
        machine = ["--num_machines", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1"]
        with open(log_dir / f"machine-{index}.log", "w") as log:
            argv = [*LAUNCH, "--multi_gpu", "--num_processes", "2", *machine, "--main_process_port", port, *launch]
            machines.append(
                subprocess.Popen(
                    [*argv, *TRAIN, *train_args],
                    cwd=ROOT,
                    env=subprocess_env(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # killed as a group if it hangs
                )
            )
    return machines


def finish(machines: list[subprocess.Popen], log_dir: Path, timeout: int = TIMEOUT) -> list[tuple[int, str]]:
    """Each machine's exit status and output, once all have ended; killed, and the test failed, after `timeout`."""
    deadline = time.monotonic() + timeout
    for machine in machines:
        try:
            machine.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for other in machines:
                os.killpg(other.pid, signal.SIGKILL)
                other.wait()
            pytest.fail(f"the machines still ran after {timeout} s")
    logs = [(log_dir / f"machine-{index}.log").read_text() for index in range(len(machines))]
    return [(machine.returncode, log) for machine, log in zip(machines, logs)]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "model.safetensors")


def largest_difference(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max((a[name] - b[name]).abs().max().item() for name in a)


def step_losses(run_dir: Path) -> dict[int, float]:
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    return {h["step"]: h["loss"] for h in history if "loss" in h}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 6 updates three ways: one process accumulating 2 batches, one machine with 2 processes (the launch
    config launch/cpu_processes.yaml), two machines with 1 process each (the same tokenizer for all)."""
    base = tmp_path_factory.mktemp("distributed")
    data_dir = write_multi30k_subset(base / "data", {"train": 600, "val": 20})
    single, double, machines = base / "single", base / "double", base / "machines"
    run([sys.executable, *TRAIN, *options(data_dir, single, "--gradient_accumulation_steps", "2")])
    tok = ["--tokenizer", str(single / "tokenizer")]
    config = ["--config_file", "launch/cpu_processes.yaml"]
    launched = run([*LAUNCH, *config, *TRAIN, *options(data_dir, double, *tok)])
    started = time.perf_counter()
    # The machines train their tokenizer (the main process, while machine 1 waits for it), the same as `single`'s.
    for status, log in finish(two_machines(base, *options(data_dir, machines)), base):
        assert status == 0, log[-4000:]
    print(f"{time.perf_counter() - started:.1f} s: two machines")
    return {"data": data_dir, "single": single, "double": double, "machines": machines, "log": launched.stderr}


@pytest.mark.slow
def test_two_machines_train_the_weights_of_one_machine_with_two_processes(runs):
    """Two loopback machines of one process each are one machine with two processes, to the last bit; one process
    accumulating the same two batches per update is the same run within float rounding (an all-reduce sums in
    another order than a local accumulation)."""
    for name in ("single", "double", "machines"):
        training = json.loads((runs[name] / "results.json").read_text())["training"]
        assert training["topology"] == {
            "machines": 2 if name == "machines" else 1,
            "processes_per_machine": 2 if name == "double" else 1,
            "world_size": 1 if name == "single" else 2,
            "gradient_accumulation_steps": 2 if name == "single" else 1,
            "max_tokens_per_update": 2 * 512,
        }
    tokenizer = (runs["single"] / "tokenizer" / "tokenizer.json").read_text()
    assert (runs["machines"] / "tokenizer" / "tokenizer.json").read_text() == tokenizer
    double, machines, single = (weights(runs[name]) for name in ("double", "machines", "single"))
    print("largest difference: two machines vs one machine", largest_difference(double, machines))
    print("largest difference: two processes vs one accumulating two", largest_difference(double, single))
    assert all(torch.equal(double[name], machines[name]) for name in double)
    assert largest_difference(double, single) < 1e-4
    assert step_losses(runs["double"]) == step_losses(runs["machines"])


@pytest.mark.slow
@pytest.mark.parametrize("config", ["machines_static.yaml", "machines_c10d.yaml"])
def test_the_several_machines_configs_train_the_same_weights_on_two_loopback_machines(runs, tmp_path, config):
    """launch/'s configs for several machines, with the machine's rank, address and port and 2 processes in all on
    the command line (the configs say 16): the weights of one machine with two processes."""
    out = tmp_path / "run"
    train_args = options(runs["data"], out, "--tokenizer", str(runs["single"] / "tokenizer"))
    launch = ("--config_file", f"launch/{config}")
    for status, log in finish(two_machines(tmp_path, *train_args, launch=launch), tmp_path):
        assert status == 0, log[-4000:]
    assert json.loads((out / "results.json").read_text())["training"]["topology"]["machines"] == 2
    double = weights(runs["double"])
    assert all(torch.equal(tensor, double[name]) for name, tensor in weights(out).items())


@pytest.mark.slow
def test_each_log_line_of_a_two_process_run_appears_once(runs):
    lines = [line.split(" ", 2)[-1] for line in runs["log"].splitlines() if " INFO " in line or " WARNING " in line]
    assert len(lines) > 10 and len(lines) == len(set(lines)), runs["log"][-4000:]
    assert sum("Precision:" in line for line in lines) == 1


def resumed_from_update_3(runs, name: str, launch: list[str], *extra: str) -> Path:
    """The two-process run's directory as it was after its first checkpoint, resumed by `launch`."""
    out = runs["single"].parent / name
    shutil.copytree(runs["double"] / "checkpoint-3", out / "checkpoint-3")
    tok = ["--tokenizer", str(runs["single"] / "tokenizer")]
    run([*launch, *TRAIN, *options(runs["data"], out, *tok, "--resume_from_checkpoint", "true", *extra)])
    return out


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_two_processes_exactly(runs):
    out = resumed_from_update_3(runs, "resumed_double", [*LAUNCH, "--multi_gpu", "--num_processes", "2"])
    print(
        "largest difference: resumed in two processes vs uninterrupted",
        largest_difference(weights(out), weights(runs["double"])),
    )
    assert all(torch.equal(a, b) for a, b in zip(weights(out).values(), weights(runs["double"]).values()))
    assert step_losses(out) == step_losses(runs["double"])  # updates 1-3 from the checkpoint's state, 4-6 anew


@pytest.mark.slow
def test_a_two_process_checkpoint_resumes_in_one_process_accumulating_two(runs):
    out = resumed_from_update_3(runs, "resumed_single", [sys.executable], "--gradient_accumulation_steps", "2")
    resumed, uninterrupted = step_losses(out), step_losses(runs["double"])
    assert resumed.keys() == uninterrupted.keys() == {1, 2, 3, 4, 5, 6}  # 1-3 from the checkpoint's state
    assert all(abs(resumed[s] - uninterrupted[s]) < 1e-4 for s in (4, 5, 6)), (resumed, uninterrupted)
    difference = largest_difference(weights(out), weights(runs["double"]))
    print("largest difference: resumed in one process vs two, uninterrupted", difference)
    assert difference < 1e-4


@pytest.mark.slow
def test_a_machine_that_dies_ends_the_run_and_its_rank_is_named(runs, tmp_path):
    """Machine 1's training process is killed after the run has begun: both machines end, well within the timeout,
    and torchrun names the rank that died (docs/distributed.md: resume from the last complete checkpoint)."""
    import psutil

    long_run = options(runs["data"], tmp_path / "run", "--max_steps", "100000", "--save_strategy", "no")
    machines = two_machines(tmp_path, *long_run, "--tokenizer", str(runs["single"] / "tokenizer"))
    deadline = time.monotonic() + TIMEOUT
    while "'loss'" not in (tmp_path / "machine-0.log").read_text():  # the first update's log line
        assert time.monotonic() < deadline and machines[0].poll() is None, (tmp_path / "machine-0.log").read_text()
        time.sleep(0.5)
    workers = [
        process
        for process in psutil.Process(machines[1].pid).children(recursive=True)
        if "vanilla_transformer.training.train" in process.cmdline()
        and "accelerate" not in " ".join(process.cmdline())
    ]
    assert len(workers) == 1
    started = time.perf_counter()
    workers[0].kill()
    (status_0, log_0), (status_1, log_1) = finish(machines, tmp_path, timeout=120)
    print(f"{time.perf_counter() - started:.1f} s from the kill to the end of both machines")
    assert status_0 != 0 and status_1 != 0
    assert "rank      : 1 (local_rank: 0)" in log_1 and "Signal 9 (SIGKILL)" in log_1, log_1[-3000:]


@pytest.mark.slow
def test_a_wrong_machine_rank_ends_the_run_and_says_which_rank_is_missing(runs, tmp_path):
    """Machine ranks 0 and 2 of 2 machines (static rendezvous): machine 0 waits for machine 1, which never comes;
    with --rdzv_conf timeout=20 both stop after 20 s, each naming the rank it waited for, instead of torchrun's
    600 s default."""
    run_options = options(runs["data"], tmp_path / "run", "--tokenizer", str(runs["single"] / "tokenizer"))
    started = time.perf_counter()
    machines = two_machines(tmp_path, *run_options, ranks=(0, 2), launch=("--rdzv_conf", "timeout=20"))
    (status_0, log_0), (status_2, log_2) = finish(machines, tmp_path, timeout=120)
    print(f"{time.perf_counter() - started:.1f} s: machine ranks 0 and 2 of 2")
    assert status_0 != 0 and status_2 != 0
    assert "role_info/1" in log_0, log_0[-3000:]  # machine 0 waited for machine 1
    assert "assigned_ranks/2" in log_2, log_2[-3000:]  # machine 2 waited for a place that does not exist
    assert not (tmp_path / "run").exists()  # no process trained


# ---- evaluation and the test translations under several processes


# The validation split's translations as the trainer's evaluation loop gathers them (`predict`: the loop that
# `evaluate` runs), written by the main process in the order the loop gives them, each with its reference.
PREDICT_SCRIPT = """
import json, sys
from datasets import DatasetDict
from vanilla_transformer import VanillaTransformerForConditionalGeneration, register
from vanilla_transformer.data.corpus import load_parallel_corpus, tokenize_corpus
from vanilla_transformer.data.tokenizer import load_tokenizer
from vanilla_transformer.evaluation.bleu import decode_ids
from vanilla_transformer.training.options import VanillaTrainingArguments
from vanilla_transformer.training.trainer import build_trainer

register()
model_dir, data_dir, out = sys.argv[1:]
tokenizer = load_tokenizer(model_dir)
model = VanillaTransformerForConditionalGeneration.from_pretrained(model_dir)
raw = load_parallel_corpus(data_dir, "en", "de", splits=("validation",), split_names={"validation": "val"})
validation = tokenize_corpus(DatasetDict(validation=raw["validation"]), tokenizer, max_length=256)["validation"]
args = VanillaTrainingArguments(
    output_dir=out + ".trainer", per_device_eval_batch_size=8, predict_with_generate=True, generation_max_length=40,
    generation_num_beams=1, report_to="none", use_cpu=True, bf16="false",
)
trainer = build_trainer(model, args, tokenizer)
output = trainer.predict(validation)
if trainer.is_world_process_zero():
    pairs = list(zip(decode_ids(output.predictions, tokenizer), decode_ids(output.label_ids, tokenizer)))
    open(out, "w").write(json.dumps(pairs))
"""


def evaluation(run_dir: Path, log: str) -> dict:
    """The evaluation before the first update (the same weights on any topology), the number of sentences the BLEU
    line counted, and the test translations."""
    history = json.loads((run_dir / "trainer_state.json").read_text())["log_history"]
    first = next(h for h in history if "eval_bleu" in h and h["step"] == 0)
    sentences = [line.rsplit(", ", 1)[-1] for line in log.splitlines() if "BLEU = " in line]
    return {
        "metrics": {
            k: v for k, v in first.items() if k.startswith("eval_") and "runtime" not in k and "per_second" not in k
        },
        "bleu_lines": sentences,
        "test": (run_dir / "test_2016_flickr.hyp.de").read_text(),
    }


@pytest.mark.slow
def test_evaluation_and_test_translations_are_those_of_one_process_on_two_and_three(tmp_path):
    """All 1,014 validation sentences of Multi30k, evaluated (loss and greedy BLEU) by 1, 2 and 3 processes: the last
    round of batches is filled up with repeated sentences on 2 and 3 processes (1,014 = 16 x 63 + 6 = 24 x 42 + 6),
    which must not count. Every sentence once, paired with its reference: the same BLEU, generated length and loss
    (to float rounding, 1e-5: the float32 per-sentence sums are added in another order) as one process. The test split is
    translated by the main process alone, the same text. The command's runs evaluate a tiny model trained for 100
    updates, before their own first update. Then the trainer's evaluation loop itself (`predict`) translates the
    split with the shipped multi30k-en-de model, whose translations differ from sentence to sentence: on 2 and 3
    processes the same translations, each with its reference, in the same order, every reference once."""
    data_dir = write_multi30k_subset(tmp_path / "data", {"train": 1000, "val": 1014, "test_2016_flickr": 30})
    common = [
        "--dataset",
        str(data_dir),
        "--max_length",
        "256",  # no validation pair dropped
        "--max_tokens",
        "512",
        "--per_device_eval_batch_size",
        "8",
        "--generation_max_length",
        "40",
        "--num_beams",
        "1",
        "--length_penalty",  # greedy: the recipe's beam-search options would make the generation config invalid
        "1.0",
        "--early_stopping",
        "false",
        "--plots",
        "false",
        "--report_to",
        "none",
        "--max_train_minutes",
        "none",
        "--save_strategy",
        "no",
        "--bf16",
        "false",
        "--seed",
        "3",
    ]
    trained = tmp_path / "trained"
    fit = [
        "--max_steps",
        "100",
        "--warmup_steps",
        "40",
        "--lr_factor",
        "2.0",
        "--eval_strategy",
        "no",
        "--test_split",
        "",
    ]
    run([sys.executable, *TRAIN, "--output_dir", str(trained), *tiny_options(vocab_size=1000), *common, *fit])
    evaluate = ["--init_from", str(trained), "--tokenizer", str(trained / "tokenizer"), "--max_steps", "1"]
    evaluate += ["--eval_on_start", "--eval_strategy", "steps", "--eval_steps", "1"]
    results = {}
    for processes in (1, 2, 3):
        out = tmp_path / f"processes-{processes}"
        launch = [*LAUNCH, "--multi_gpu", "--num_processes", str(processes)] if processes > 1 else [sys.executable]
        log = run([*launch, *TRAIN, "--output_dir", str(out), *common, *evaluate]).stderr
        results[processes] = evaluation(out, log)
    print({n: r["metrics"] for n, r in results.items()})
    script = tmp_path / "predict.py"
    script.write_text(PREDICT_SCRIPT)
    translations = {}
    for processes in (1, 2, 3):
        out = tmp_path / f"translations-{processes}.json"
        launch = [*LAUNCH, "--multi_gpu", "--num_processes", str(processes)] if processes > 1 else [sys.executable]
        run([*launch, str(script), str(shipped_model_path("multi30k-en-de")), str(data_dir), str(out)])
        translations[processes] = json.loads(out.read_text())
    references = sorted(unicodedata.normalize("NFC", line).strip() for line in read_multi30k("val.de.gz"))
    assert sorted(reference for _, reference in translations[1]) == references  # every sentence once
    assert len({translation for translation, _ in translations[1]}) > 1000  # each its own: a misplaced one shows
    assert translations[2] == translations[1] and translations[3] == translations[1]  # in the same order
    one = results[1]
    assert one["bleu_lines"][0] == "1014 sentences)" and one["metrics"]["eval_bleu"] > 0
    assert len(set(one["test"].splitlines())) > 10  # translations that differ: a misplaced one would show
    for processes in (2, 3):
        assert results[processes]["bleu_lines"] == one["bleu_lines"]
        assert results[processes]["test"] == one["test"]
        for name, value in one["metrics"].items():
            assert results[processes]["metrics"][name] == pytest.approx(value, rel=1e-5), (processes, name)
        bleu_and_length = {k: results[processes]["metrics"][k] for k in ("eval_bleu", "eval_gen_len")}
        assert bleu_and_length == {k: one["metrics"][k] for k in ("eval_bleu", "eval_gen_len")}


# ---- the launch configs, the SLURM script and the README's line


@pytest.mark.parametrize("config", sorted(p.name for p in (ROOT / "launch").glob("*.yaml")))
def test_each_launch_config_is_accelerates_and_docs_distributed_gives_its_command(config):
    from accelerate.commands.config.config_args import load_config_from_file

    loaded = load_config_from_file(str(ROOT / "launch" / config))
    assert loaded.distributed_type == "MULTI_GPU"  # torchrun: every process starts, on GPUs or a CPU
    assert loaded.mixed_precision == "no"  # the run's --bf16/--fp16 decide
    assert f"accelerate launch --config_file launch/{config} " in (ROOT / "docs" / "distributed.md").read_text()


@pytest.mark.parametrize(
    ("nodes", "processes", "batch"),
    [(2, "16", ["--max_tokens", "1562"]), (1, "8", ["--gradient_accumulation_steps", "1"])],
)
def test_the_slurm_script_starts_one_launcher_per_machine_with_its_rank(tmp_path, nodes, processes, batch):
    """launch/slurm.sbatch under stand-ins for srun (one task per machine, SLURM_NODEID each), scontrol and accelerate
    (which prints its arguments): each machine's launcher gets its rank, the first machine's name, every process, and
    the batch that keeps the paper's 25,000 tokens per update."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    stand_ins = {
        "srun": 'for id in $(seq 0 $((SLURM_NNODES - 1))); do SLURM_NODEID=$id "$@"; done',
        "scontrol": "printf 'node-a\\nnode-b\\n'",
        "accelerate": f"exec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' \"$@\"",
    }
    for name, body in stand_ins.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_NNODES": str(nodes)}
    env["SLURM_JOB_NODELIST"] = "node-[a-b]"
    result = subprocess.run(
        ["bash", "launch/slurm.sbatch", "--max_train_minutes", "60"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    launches = [json.loads(line) for line in result.stdout.splitlines()]
    assert launches == [
        [
            "launch",
            "--config_file",
            "launch/machines_c10d.yaml",
            "--num_machines",
            str(nodes),
            "--num_processes",
            processes,
            "--machine_rank",
            str(rank),
            "--main_process_ip",
            "node-a",
            "--main_process_port",
            "29500",
            *TRAIN,
            "--recipe",
            "wmt14_en_de_base",
            *batch,
            "--max_train_minutes",
            "60",
        ]
        for rank in range(nodes)
    ]


def readme_launch() -> list[str]:
    """The README's two-process line, up to the command's own arguments."""
    line = next(
        line
        for line in (ROOT / "README.md").read_text().splitlines()
        if "accelerate launch" in line and "--num_processes 2" in line
    )
    words = line.split()
    return words[: words.index("vanilla_transformer.training.train") + 1]


@pytest.mark.slow
@pytest.mark.parametrize("multi_gpu", [True, False], ids=["as the README says", "without --multi_gpu"])
def test_the_readmes_two_process_line_runs_two_processes_on_a_cpu(tmp_path, multi_gpu):
    """The README's line, and the issue's (without --multi_gpu: accelerate starts one process, the command starts
    the launch again), train in two processes (results.json's world size), each log line once."""
    words = readme_launch()
    assert words[:2] == ["accelerate", "launch"] and "--multi_gpu" in words
    if not multi_gpu:
        words.remove("--multi_gpu")
    data_dir = write_multi30k_subset(tmp_path / "data", {"train": 600, "val": 20})
    out = tmp_path / "run"
    launch = [sys.executable, "-m", "accelerate.commands.launch", *words[2:]]
    result = run([*launch, *options(data_dir, out, "--max_steps", "2", "--save_strategy", "no")])
    training = json.loads((out / "results.json").read_text())["training"]
    assert training["world_size"] == 2 and training["topology"]["processes_per_machine"] == 2
    lines = [line.split(" ", 2)[-1] for line in result.stderr.splitlines() if " INFO " in line or " WARNING " in line]
    assert len(lines) == len(set(lines)), result.stderr[-4000:]
    assert sum("started one process instead of the ones asked for" in line for line in lines) == (not multi_gpu)
