"""Checkpoint averaging (section 6.1): the mean of the weights, in a directory that loads like any checkpoint."""

import json
from pathlib import Path

import pytest
import torch
from helpers import TINY_SIZES
from safetensors import safe_open
from safetensors.torch import load_file

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer.checkpoints import last_complete_checkpoints
from vanilla_transformer.commands import main
from vanilla_transformer.training.averaging import average_checkpoints, average_state_dicts


TINY = dict(TINY_SIZES, vocab_size=40, d_model=16, encoder_ffn_dim=32, decoder_ffn_dim=32, dropout=0.0)


def tiny_model(seed, **overrides):
    torch.manual_seed(seed)
    return VanillaTransformerForConditionalGeneration(VanillaTransformerConfig(**{**TINY, **overrides})).eval()


def write_checkpoint(model, path: Path) -> str:
    """A directory as the Trainer writes it: save_pretrained output plus training state."""
    model.save_pretrained(path)
    (path / "tokenizer_config.json").write_text("{}")
    torch.save({"state": {}}, path / "optimizer.pt")
    complete(path)
    return str(path)


def complete(path: Path) -> Path:
    """The Trainer writes trainer_state.json last: its presence marks a checkpoint whose save finished."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "trainer_state.json").write_text(json.dumps({"global_step": int(path.name.rsplit("-", 1)[-1])}))
    return path


def logits(model):
    ids = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    with torch.no_grad():
        decoder_input_ids = torch.tensor([[1, 5, 6], [1, 8, 9]])
        return model(input_ids=ids, attention_mask=ids.ne(0), decoder_input_ids=decoder_input_ids).logits


def test_last_complete_checkpoints_sorted_by_step(tmp_path):
    for step in (900, 1000, 100, 20):
        complete(tmp_path / f"checkpoint-{step}")
    (tmp_path / "tmp-checkpoint-1100").mkdir()  # an unfinished save
    (tmp_path / "checkpoint-1200").write_text("not a directory")
    (tmp_path / "runs").mkdir()
    expected = [str(tmp_path / f"checkpoint-{s}") for s in (100, 900, 1000)]
    assert last_complete_checkpoints(tmp_path, 3) == expected
    assert last_complete_checkpoints(str(tmp_path), 4)[0] == str(tmp_path / "checkpoint-20")
    assert last_complete_checkpoints(tmp_path, 9) == [str(tmp_path / f"checkpoint-{s}") for s in (20, 100, 900, 1000)]
    assert last_complete_checkpoints(tmp_path, 3, after=100) == expected[1:]  # the learning-rate cool-down's
    assert last_complete_checkpoints(tmp_path, 0) == [] and last_complete_checkpoints(tmp_path / "missing", 2) == []


def test_checkpoints_whose_save_did_not_finish_are_never_averaged(tmp_path, capsys):
    for step in (100, 200):
        complete(tmp_path / f"checkpoint-{step}")
    (tmp_path / "checkpoint-300").mkdir()  # a crash during its save: no trainer_state.json
    (tmp_path / "checkpoint-400").mkdir()
    (tmp_path / "checkpoint-400" / "trainer_state.json").write_text('{"global_st')  # truncated
    assert last_complete_checkpoints(tmp_path, 2) == [
        str(tmp_path / "checkpoint-100"),
        str(tmp_path / "checkpoint-200"),
    ]
    assert main(["average", str(tmp_path), "--last", "3", "--output", str(tmp_path / "avg")]) == 2
    assert "only 2 checkpoints whose save finished" in capsys.readouterr().err


def test_identical_checkpoints_give_the_same_model(tmp_path):
    model = tiny_model(0)
    dirs = [write_checkpoint(model, tmp_path / f"checkpoint-{i}") for i in (1, 2, 3, 4, 5)]
    out = average_checkpoints(dirs, str(tmp_path / "averaged"))
    averaged = VanillaTransformerForConditionalGeneration.from_pretrained(out).eval()
    assert torch.equal(logits(averaged), logits(model))


def test_two_checkpoints_average_to_their_mean(tmp_path):
    a, b = tiny_model(0), tiny_model(1)
    out = average_checkpoints(
        [write_checkpoint(a, tmp_path / "checkpoint-10"), write_checkpoint(b, tmp_path / "checkpoint-20")],
        str(tmp_path / "averaged"),
    )
    saved = load_file(str(Path(out) / "model.safetensors"))
    sa, sb = a.state_dict(), b.state_dict()
    for key, tensor in saved.items():
        expected = ((sa[key].double() + sb[key].double()) / 2).to(sa[key].dtype)
        assert torch.equal(tensor, expected), key
    # Tied weights are stored and averaged once, as save_pretrained stores them.
    assert "model.shared.weight" in saved and "lm_head.weight" not in saved
    assert "model.encoder.embed_tokens.weight" not in saved

    averaged = VanillaTransformerForConditionalGeneration.from_pretrained(out).eval()
    assert averaged.lm_head.weight.data_ptr() == averaged.model.shared.weight.data_ptr()
    reference = tiny_model(2)
    reference.load_state_dict({k: ((sa[k] + sb[k]) / 2) for k in sa})  # float32 mean: equal up to rounding
    torch.testing.assert_close(logits(averaged), logits(reference), rtol=1e-5, atol=1e-6)
    assert not torch.allclose(logits(averaged), logits(a))

    # The model files come along, the training state does not.
    names = {p.name for p in Path(out).iterdir()}
    assert {"config.json", "generation_config.json", "tokenizer_config.json", "model.safetensors"} <= names
    assert not names & {"optimizer.pt", "trainer_state.json"}
    with safe_open(str(Path(out) / "model.safetensors"), framework="pt") as f:
        assert f.metadata()["format"] == "pt"
        assert json.loads(f.metadata()["averaged_checkpoints"]) == ["checkpoint-10", "checkpoint-20"]


def test_mean_is_taken_in_float64_then_cast_back():
    # bfloat16 keeps 8 significant bits: summing 1 + (1 + 2^-7) + (1 + 2^-7) in bfloat16 rounds to 3 and gives a mean
    # of 1.0; the exact mean 1 + 2/3 * 2^-7 rounds to 1 + 2^-7.
    values = [torch.tensor([1.0], dtype=torch.bfloat16)] + [torch.tensor([1 + 2**-7], dtype=torch.bfloat16)] * 2
    states = [{"w": v, "step": torch.tensor([7])} for v in values]
    averaged = average_state_dicts(states)
    assert averaged["w"].dtype == torch.bfloat16
    assert averaged["w"].item() == 1 + 2**-7
    assert torch.equal(averaged["step"], torch.tensor([7]))  # integer tensors are copied
    with pytest.raises(ValueError, match="'step'"):
        average_state_dicts([states[0], {"w": values[1], "step": torch.tensor([8])}])


def test_mismatched_checkpoints_are_rejected(tmp_path):
    base = write_checkpoint(tiny_model(0), tmp_path / "checkpoint-1")
    wider = write_checkpoint(tiny_model(0, encoder_ffn_dim=48), tmp_path / "checkpoint-2")
    with pytest.raises(ValueError, match=r"'model\.encoder\.layers\.0\.ffn\..*' is \(48"):
        average_checkpoints([base, wider], str(tmp_path / "out"))
    deeper = write_checkpoint(tiny_model(0, decoder_layers=2), tmp_path / "checkpoint-3")
    with pytest.raises(ValueError, match="same tensors"):
        average_checkpoints([base, deeper], str(tmp_path / "out"))
    (tmp_path / "checkpoint-4").mkdir()
    torch.save({}, tmp_path / "checkpoint-4" / "pytorch_model.bin")
    with pytest.raises(ValueError, match="safetensors"):
        average_checkpoints([base, str(tmp_path / "checkpoint-4")], str(tmp_path / "out"))
    with pytest.raises(ValueError, match="checkpoint_dirs"):
        average_checkpoints([], str(tmp_path / "out"))
    with pytest.raises(ValueError, match="output_dir"):
        average_checkpoints([base], base)


def test_command_line(tmp_path, capsys):
    run = tmp_path / "run"
    models = [tiny_model(seed) for seed in (0, 1, 2)]
    for step, model in zip((100, 200, 300), models):
        write_checkpoint(model, run / f"checkpoint-{step}")
    out = tmp_path / "avg"
    assert main(["average", str(run), "--last", "2", "--output", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    saved = load_file(str(out / "model.safetensors"))
    shared = [model.state_dict()["model.shared.weight"].double() for model in models]
    expected = (shared[1] + shared[2]) / 2
    assert torch.equal(saved["model.shared.weight"], expected.float())
    assert main(["average", str(run), "--last", "4", "--output", str(out)]) == 2  # one line naming --last
    assert "only 3 checkpoints" in capsys.readouterr().err
