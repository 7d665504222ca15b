"""scripts/gpu_check.py, the device check, run end to end on the CPU at tiny sizes (`--smoke`): every part writes its
JSON lines, with the fields the device run is read by, and the correctness checks pass here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import MULTI30K, subprocess_env


ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
COMMON = ("check", "device", "dtype", "torch", "cuda", "transformers")


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    output = tmp_path_factory.mktemp("gpu_check") / "smoke.jsonl"
    run = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--smoke",
            "--data_dir",
            str(MULTI30K),
            "--output",
            str(output),
        ],
        cwd=ROOT,
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    for line in lines:
        assert all(key in line for key in COMMON), line
    return lines


def only(lines, check, **match):
    found = [line for line in lines if line["check"] == check and all(line.get(k) == v for k, v in match.items())]
    assert len(found) == 1, (check, match, found)
    return found[0]


def test_every_part_ran_and_the_run_ended(smoke):
    parts = {line["part"]: line for line in smoke if line["check"] == "part"}
    assert set(parts) == {"env", "correct", "throughput", "train", "table3"}
    failed = {name: line.get("error") for name, line in parts.items() if not line["ok"]}
    assert not failed, failed
    assert smoke[-1]["check"] == "done" and smoke[-1]["seconds"] > 0


def test_environment_lines(smoke):
    env = only(smoke, "env")
    assert env["cpu_count"] >= 1 and isinstance(env["bf16_native"], bool) and env["torch"]
    assert Path(env["package_path"]) == ROOT / "vanilla_transformer"
    peak = only(smoke, "matmul_peak")
    assert peak["tflops"] > 0 and peak["peak_tflops"] == 989.4 and peak["dtype"] == "bfloat16"


def test_correctness_checks_pass_on_this_device(smoke):
    for dtype in ("float32", "bfloat16"):
        line = only(smoke, "forward_backward_vs_cpu_float64", dtype=dtype)
        assert line["ok"] is True, line
        assert line["sdpa_backend"] and line["grads_compared"] > 10 and not line["grads_missing"]
        assert 0 <= line["logits_max_abs_diff"] <= line["tolerance"]["logits"] * line["logits_max_abs"]
    forced = {line["backend"]: line for line in smoke if line["check"] == "sdpa_backend_forced"}
    assert set(forced) == {"FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH"}
    assert forced["MATH"]["train_runs"] and forced["MATH"]["generate_runs"] and forced["MATH"]["ok"] is True
    for line in forced.values():  # a backend that cannot run says why
        assert line["train_runs"] or line["train_error"]
    for dtype in ("float32", "bfloat16"):
        for beams in (1, 4):
            line = only(smoke, "generate_cache", dtype=dtype, num_beams=beams)
            assert line["ok"] is True and line["sequences"] == 4 and line["sdpa_backend"], line
    compiled = only(smoke, "compile_vs_eager", dtype="float32")
    assert compiled["ok"] is True and compiled["steps"] == 3 and compiled["compile_backend"] == "eager"
    assert compiled["loss_max_abs_diff"] < 1e-4 and len(compiled["compiled_losses"]) == 3
    assert "CPU smoke" in only(smoke, "compile_vs_eager", dtype="bfloat16")["skipped"]


def test_throughput_lines(smoke):
    ours = only(smoke, "throughput", variant="ours eager")
    marian = only(smoke, "throughput_marian", variant="marian eager")
    for line in (ours, marian):
        assert line["tokens_per_s"] > 0 and 0 < line["mfu"] < 1 and line["peak_tflops"] == 989.4
        assert line["projected_paper_base_minutes"] > 0 and line["goal_minutes"] == 60
        assert line["updates_timed"] == 2 and line["target_tokens_per_update"] > 0
        assert line["mfu_vs_measured_matmul"] > 0
        assert line["sdpa_backend"] and line["attn_implementation"] == "sdpa"  # the kernel the profiler saw
    assert marian["model"] == "marian" and ours["model"] == "ours"
    assert ours["vs_marian"] == pytest.approx(ours["tokens_per_s"] / marian["tokens_per_s"], rel=1e-2)
    assert "skipped" in only(smoke, "throughput", variant="ours compile")
    assert only(smoke, "throughput_vs_marian", variant="ours eager")["vs_marian"] > 0
    profile = only(smoke, "profile")
    assert profile["top_ops"] and all(row["calls"] > 0 for row in profile["top_ops"])


def test_multi30k_training_gives_a_test_bleu(smoke):
    line = only(smoke, "train_multi30k")
    assert line["updates"] > 0 and line["train_minutes"] > 0 and line["test_sentences"] == 40
    assert 0 <= line["bleu"] <= 100 and 0 <= line["bleu_lowercase"] <= 100
    assert line["bleu_signature"].startswith("nrefs:1|case:mixed")


def test_table3_runs_two_rows_at_once_through_the_command(smoke):
    rows = {line["row"]: line for line in smoke if line["check"] == "table3_row"}
    assert set(rows) == {"base", "D1"} and rows["D1"]["changed"] == {"dropout": 0.0}
    for line in rows.values():
        assert line["updates"] == 3 and line["params"] > 0 and line["dtype"] == "float32"
        assert 0 <= line["test_bleu"] <= 100 and line["validation_perplexity"] > 1
    table = only(smoke, "table3")
    assert table["status"] == 0 and table["jobs"] == 2 and table["rows"] == ["base", "D1"]
    assert Path(table["table"]).read_text().count("| D1 ") == 1


def test_bad_options_are_one_line(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import gpu_check

    with pytest.raises(SystemExit) as stop:
        gpu_check.parse_args(["--device", "cpu", "--output", "x", "--skip", "warp"])
    assert stop.value.code == 2
    message = "--skip: unknown part(s) ['warp']; the parts are env, correct, throughput, train, table3"
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(message)
