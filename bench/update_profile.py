"""Where an update's time goes: `vanilla-transformer train` as a user runs it, with a clock on each part of the
Trainer's update (transformers' `Trainer` loop, the package's overrides).

    python bench/update_profile.py --updates 300 -- --recipe multi30k_en_de_cpu --dataset ../shared/data/multi30k

runs `train` with the options after `--` for `--updates` updates (no evaluation, no test split) and prints, per update,
the milliseconds of: the batches (the data loader, the collator and subword splitting, the Trainer's
`get_batch_samples`), subword splitting alone, forward + loss (`compute_loss`), backward (the rest of
`training_step`), the gradient norm, the optimizer step, and what follows an update (logs, checkpoint saves:
`_maybe_log_save_evaluate`), checkpoint saves alone; and the updates per second over updates 2-21 (what the warm-up
fit reads, `callbacks.WarmupFitter`) against the rest of the run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    parser.add_argument("--updates", type=int, default=300)
    parser.add_argument("train_options", nargs=argparse.REMAINDER, help="after --: the train command's options")
    args = parser.parse_args()
    options = [o for o in args.train_options if o != "--"]

    import torch
    from transformers import Trainer, TrainerCallback

    from vanilla_transformer.training import train as train_command
    from vanilla_transformer.training.trainer import VanillaTransformerTrainer

    spent: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    state = {"step": 0}

    def clocked(cls, name: str, part: str):
        original = getattr(cls, name)

        def wrapper(self, *a, **k):
            start = time.perf_counter()
            try:
                return original(self, *a, **k)
            finally:
                spent[part][state["step"] + 1] += time.perf_counter() - start

        setattr(cls, name, wrapper)

    clocked(VanillaTransformerTrainer, "get_batch_samples", "batches (loader, collator, subword splitting)")
    clocked(VanillaTransformerTrainer, "_split_subwords", "  of which subword splitting")
    clocked(Trainer, "compute_loss", "forward + loss")
    clocked(Trainer, "training_step", "forward + loss + backward")
    clocked(Trainer, "_get_grad_norm", "gradient norm")
    clocked(Trainer, "_maybe_log_save_evaluate", "after the update (logs, checkpoints)")
    clocked(Trainer, "_save_checkpoint", "  of which checkpoint saves")

    ends: dict[int, float] = {}

    class Clock(TrainerCallback):
        def on_pre_optimizer_step(self, args, st, control, **kwargs):
            self.start = time.perf_counter()

        def on_optimizer_step(self, args, st, control, **kwargs):
            spent["optimizer step"][st.global_step + 1] += time.perf_counter() - self.start

        def on_step_end(self, args, st, control, **kwargs):
            state["step"] = st.global_step
            ends[st.global_step] = time.perf_counter()

    original_init = VanillaTransformerTrainer.__init__

    def init(self, *a, **k):
        original_init(self, *a, **k)
        self.add_callback(Clock())

    VanillaTransformerTrainer.__init__ = init
    with tempfile.TemporaryDirectory() as out:
        argv = [
            *options,
            "--output_dir",
            out,
            "--max_steps",
            str(args.updates),
            "--max_train_minutes",
            "600",
            "--eval_strategy",
            "no",
            "--test_split",
            "",
            "--report_to",
            "none",
            "--disable_tqdm",
            "true",
        ]
        train_command.main(argv)

    steps = sorted(ends)
    later = [s for s in steps if s > 21]
    total = {s: ends[s] - ends[s - 1] for s in steps if s - 1 in ends}
    print(
        f"\n{torch.__version__}, {os.cpu_count()} cores, torch threads {torch.get_num_threads()}; options: {options}"
    )
    print(
        f"updates/s over updates 2-21: {20 / (ends[21] - ends[1]):.2f}; over updates 22-{steps[-1]}: "
        f"{len(later) / (ends[steps[-1]] - ends[21]):.2f}"
    )
    mean_update = statistics.mean(total[s] for s in later)
    print(f"\n| part of an update (updates 22-{steps[-1]}) | ms | share |\n| --- | ---: | ---: |")
    backward = {s: spent["forward + loss + backward"][s] - spent["forward + loss"][s] for s in later}
    rows = {name: {s: parts[s] for s in later} for name, parts in spent.items() if name != "forward + loss + backward"}
    rows["backward"] = backward
    for name in (
        "batches (loader, collator, subword splitting)",
        "  of which subword splitting",
        "forward + loss",
        "backward",
        "gradient norm",
        "optimizer step",
        "after the update (logs, checkpoints)",
        "  of which checkpoint saves",
    ):
        ms = 1000 * sum(rows.get(name, {}).values()) / len(later)
        print(f"| {name} | {ms:.1f} | {ms / 10 / mean_update:.1f}% |")
    print(f"| **the update, end to end** | {1000 * mean_update:.1f} | 100% |")


if __name__ == "__main__":
    sys.exit(main())
