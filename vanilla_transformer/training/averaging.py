"""Checkpoint averaging (section 6.1 of the paper: "For the base models, we used a single model obtained by
averaging the last 5 checkpoints, which were written at 10-minute intervals. For the big models, we
averaged the last 20 checkpoints.")

`average_checkpoints` reads the weights of the Trainer's `checkpoint-<step>` directories (safetensors only:
they hold tensors and nothing else, so no untrusted pickle is ever loaded), averages every tensor in
float64 and casts the mean back to the tensor's dtype, and writes a directory that loads with
`from_pretrained` like any checkpoint: the averaged `model.safetensors` plus the config, generation config,
tokenizer and remote-code files of the newest input checkpoint (training state such as `optimizer.pt` is
left out). Tied weights are stored once by `save_pretrained` (`model.shared.weight`; the lm_head and the
two embeddings are re-tied on load), so they are averaged once, and the output keeps that layout. The command, `vanilla-transformer average`, is in training/commands.py.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from ..checkpoints import TRAINING_STATE_FILES


# torch and safetensors are imported inside the functions that use them: listing checkpoints needs neither.
if TYPE_CHECKING:
    import torch


logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
WEIGHT_FILES = re.compile(r"^(model.*\.safetensors(\.index\.json)?|pytorch_model.*\.bin(\.index\.json)?)$")


def _weight_files(checkpoint: Path) -> list[Path]:
    if (checkpoint / WEIGHTS_NAME).is_file():
        return [checkpoint / WEIGHTS_NAME]
    index = checkpoint / WEIGHTS_INDEX_NAME
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [checkpoint / shard for shard in shards]
    raise ValueError(
        f"Checkpoint {str(checkpoint)!r} has no {WEIGHTS_NAME} (nor {WEIGHTS_INDEX_NAME}): only safetensors "
        f"checkpoints are averaged (pickled .bin files are never loaded); re-save the model with `save_pretrained`."
    )


def _load_weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    tensors: dict[str, torch.Tensor] = {}
    for path in _weight_files(checkpoint):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (a safetensors handle, not a dict: it has no __iter__)
                tensors[key] = handle.get_tensor(key)
    return tensors


def average_state_dicts(state_dicts: Iterable[dict[str, torch.Tensor]], names: list[str] | None = None) -> dict:
    """The element-wise mean of `state_dicts`, accumulated in float64 and cast back to each tensor's dtype.
    Non-floating tensors (integer buffers) must be equal in all inputs and are copied. `state_dicts` may be a
    generator: only the float64 sums and one input are in memory at a time (20 checkpoints of the big model
    would not fit otherwise). `names` label the inputs in error messages."""
    import torch

    sums: dict[str, torch.Tensor] = {}
    dtypes: dict[str, torch.dtype] = {}
    count = 0
    for count, state in enumerate(state_dicts, start=1):
        name = names[count - 1] if names else f"#{count - 1}"
        if count == 1:
            first_name = name
            dtypes = {key: tensor.dtype for key, tensor in state.items()}
            sums = {key: t.to(torch.float64) if t.is_floating_point() else t.clone() for key, t in state.items()}
            continue
        if state.keys() != sums.keys():
            missing, extra = sorted(sums.keys() - state.keys()), sorted(state.keys() - sums.keys())
            raise ValueError(
                f"Checkpoint {name} does not have the same tensors as {first_name} (missing: {missing[:5]}, "
                f"unexpected: {extra[:5]}): average only checkpoints of the same model and configuration."
            )
        for key, tensor in state.items():
            if tensor.shape != sums[key].shape or tensor.dtype != dtypes[key]:
                raise ValueError(
                    f"Tensor {key!r} is {tuple(tensor.shape)} {tensor.dtype} in {name} but "
                    f"{tuple(sums[key].shape)} {dtypes[key]} in {first_name}: average only checkpoints of the "
                    f"same model and configuration."
                )
            if tensor.is_floating_point():
                sums[key] += tensor.to(torch.float64)
            elif not torch.equal(tensor, sums[key]):
                raise ValueError(
                    f"Integer tensor {key!r} differs between {first_name} and {name}; it cannot be averaged: "
                    f"average only checkpoints of the same model and configuration."
                )
    if count == 0:
        raise ValueError("`state_dicts` is empty: pass at least one state dict to average.")
    return {
        key: (total / count).to(dtypes[key]).contiguous() if dtypes[key].is_floating_point else total
        for key, total in sums.items()
    }


def average_checkpoints(checkpoint_dirs: list[str], output_dir: str) -> str:
    """Average the weights of `checkpoint_dirs` (Trainer checkpoints or `save_pretrained` directories of the
    same model) into `output_dir`, which then loads with `from_pretrained`. Returns `output_dir`.

    The non-weight files (config.json, generation_config.json, tokenizer files, remote code) are copied from
    the last directory of the list (the newest, as `checkpoints.last_complete_checkpoints` orders them); training
    state is not.
    """
    if isinstance(checkpoint_dirs, (str, Path)) or not checkpoint_dirs:
        raise ValueError(
            f"`checkpoint_dirs` must be a non-empty list of checkpoint directories, got {checkpoint_dirs!r}: "
            f"e.g. `last_complete_checkpoints(run_dir, 5)` (vanilla_transformer.checkpoints)."
        )
    from safetensors.torch import save_file

    checkpoints = [Path(path) for path in checkpoint_dirs]
    for path in checkpoints:
        if not path.is_dir():
            raise ValueError(f"`checkpoint_dirs` entry {str(path)!r} is not a directory.")
    if len({path.resolve() for path in checkpoints}) != len(checkpoints):
        logger.warning("`checkpoint_dirs` lists a directory more than once; it is weighted accordingly.")
    output = Path(output_dir)
    if output.resolve() in {path.resolve() for path in checkpoints}:
        raise ValueError(f"`output_dir` {str(output_dir)!r} is one of the inputs: write the average elsewhere.")

    # One checkpoint at a time (a generator): memory is the float64 sums plus one checkpoint.
    averaged = average_state_dicts((_load_weights(path) for path in checkpoints), names=[str(p) for p in checkpoints])

    output.mkdir(parents=True, exist_ok=True)
    for stale in output.iterdir():  # weights of an earlier average would shadow the new file
        if stale.is_file() and WEIGHT_FILES.match(stale.name):
            stale.unlink()
    source = checkpoints[-1]
    for item in source.iterdir():
        training_state = any(fnmatch.fnmatch(item.name, pattern) for pattern in TRAINING_STATE_FILES)
        if item.is_file() and not WEIGHT_FILES.match(item.name) and not training_state:
            shutil.copy2(item, output / item.name)
    # "format": "pt" is what transformers expects in the metadata of a safetensors checkpoint.
    metadata_names = [path.name for path in checkpoints]
    metadata = {"format": "pt", "averaged_checkpoints": json.dumps(metadata_names)}
    save_file(averaged, str(output / WEIGHTS_NAME), metadata=metadata)
    logger.info("Averaged %d checkpoints (%s) into %s", len(checkpoints), ", ".join(metadata_names), output)
    return str(output)
