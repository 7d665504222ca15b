"""The end-of-run report of `vanilla-transformer train`: what the run was and how well its models translate.

After training, the final model is loaded as a user loads it and scored on the test split (the split is translated
once per run, never used to choose); the average of the last checkpoints (section 6.1) is written to
`OUTPUT_DIR/averaged` and scored the same way; then plots, each model's attention figure, whether it could have
learned (`learning_verdict`), `results.json` and the model card, the final push to the Hub, and last the checkpoints
that `--keep_checkpoints` does not keep are deleted. Each directory describes its own weights; a run without a test
split writes them all the same, without test BLEU.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import time
from pathlib import Path

import torch
import transformers

from ..checkpoints import last_complete_checkpoints, prune_checkpoints
from ..evaluation.bleu import compute_bleu_with_lowercase
from ..hub.model_card import local_dataset_name, write_attention_figure, write_model_card
from ..modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration
from ..precision import cpu_bfloat16_units, cpu_model_name
from ..translation.translate import translate
from .averaging import average_checkpoints
from .callbacks import TimeLimit
from .options import DataArguments, RunArguments


logger = logging.getLogger(__name__)
MIN_BLEU = 1.0  # below it, a model does not translate (`not_learned`)


def write_report(
    trainer,
    tokenizer,
    raw,
    train_split,
    options,
    train_result,
    train_seconds: float,
    run_started: float | None = None,
    resumed: tuple[int | None, float | None] = (None, 0.0),
) -> dict:
    """Test BLEU of the final and the averaged model, plots and figures, results.json and model cards, the Hub push;
    returns the final model's results. `options` are the run's (model, data, run) arguments; `run_started`, the
    `time.perf_counter()` at the run's start, gives its wall time (`wall_time_s`: training, and the end of the run
    that follows it) beside the training time (`train_seconds`, `train_runtime_s`). `resumed` is (the update of the
    checkpoint the run resumed from, the seconds trained before it or None where unknown), (None, 0.0) for a run
    from its start: both times count the training before that checkpoint."""
    resumed_at, before = resumed
    model_args, data_args, run_args = options
    out_dir = Path(trainer.args.output_dir)
    # The final model as saved, loaded as a user loads it (float32): after bf16 training the Trainer's model still
    # carries accelerate's mixed-precision wrapper, which would run `generate`'s decoder steps under bf16 autocast.
    final_model = VanillaTransformerForConditionalGeneration.from_pretrained(out_dir).to(trainer.model.device)
    results = collect_results(trainer, tokenizer, train_split, model_args, data_args, train_result, train_seconds)
    averaged = None  # (results, model) of the average of the last checkpoints
    test = raw["test"] if data_args.test_split else None
    if test is not None:
        results["bleu"]["test"] = score_test_split(final_model, tokenizer, test, data_args, run_args, out_dir)
    if run_args.average_last:
        averaged = score_average(trainer, tokenizer, test, data_args, run_args, results)
    cards = [(results, final_model, out_dir)]
    if averaged is not None:
        cards.append((averaged[0], averaged[1], out_dir / "averaged"))
    if run_args.plots:
        split = "validation" if "validation" in raw else "train"  # --validation_split '': a training sentence
        draw_figures(trainer.state.log_history, cards, tokenizer, raw[split][0]["source"], data_args)
    # Whether each model could have learned, said in its results.json and its card (see `learning_verdict`); without
    # any BLEU, from its validation loss against that of the target's word frequencies alone.
    unmeasured = trainer.eval_dataset is None or any(card[0]["bleu"] for card in cards)
    unigram = None if unmeasured else unigram_nll(train_split, trainer.eval_dataset)
    for card_results, card_model, _ in cards:
        nll = None if unigram is None else validation_nll(card_model, trainer)
        learned, line = learning_verdict(trainer, card_results["bleu"].get("test"), nll, unigram)
        card_results["warnings"] = [] if learned else [line]
        card_results["learning"] = {"could_have_learned": learned, "line": line}
        if nll is not None:
            card_results["learning"].update(validation_nll=round(nll, 4), unigram_nll=round(unigram, 4))
    if resumed_at is not None:  # the averaged model's results share this `training` entry
        results["training"]["resumed"] = {"from_update": resumed_at, "seconds_before": before}
    if run_started is not None:
        results["training"]["wall_time_s"] = round(time.perf_counter() - run_started + (before or 0.0), 1)
    config, args = trainer.model.config, trainer.args
    write_results_and_card(out_dir, config, results, args.hub_model_id)
    if averaged is not None:
        write_results_and_card(out_dir / "averaged", config, averaged[0], None)
    if args.push_to_hub:
        # The Trainer pushed checkpoints while training (hub_strategy); the final push carries the model card
        # (written from results.json), the plots and the remote code.
        from ..hub.push import push_run

        results["hub_commit"] = push_run(
            out_dir,
            args.hub_model_id or out_dir.name,
            private=bool(args.hub_private_repo),
            revision=args.hub_revision,
            token=args.hub_token,
        )
    keep_checkpoints(out_dir, run_args, trainer)
    # The run's last word, where a person reading the log looks: whether its model could have learned.
    logger.log(
        logging.INFO if results["learning"]["could_have_learned"] else logging.WARNING, results["learning"]["line"]
    )
    return results


def learning_verdict(trainer, test_bleu: dict | None, nll: float | None = None, unigram: float | None = None):
    """(could have learned, one plain line saying so). Not when the run stopped inside its learning-rate warm-up (the
    rate never reached its peak), or a BLEU it measured at its end is below MIN_BLEU (the last validation BLEU of the
    run, the model's test BLEU), or, when it measured no BLEU at all (no evaluation, no test split), its validation
    loss `nll` (per target token) is not below `unigram`, that of the target's word frequencies alone (`unigram_nll`):
    it has not learned to read the source or what it has written. A line that says not also says which flag fixes it.

    Why MIN_BLEU = 1: BLEU (the paper's measure, section 6.1) is the geometric mean of the 1- to 4-gram precisions, so
    below 1 hardly any 3- and 4-grams of the references appear in the output: repetitions of frequent words, not
    translations. A small model that has started to learn clears it well inside its first hour, and so does a hard
    pair or domain where it is weak, so the line does not call a weak model useless (docs/training.md, "A run that
    cannot have learned says so", has an example and Multi30k's scores)."""
    state, args = trainer.state, trainer.args
    steps = state.global_step
    warmup = getattr(trainer.lr_scheduler, "warmup_steps", None)  # the paper's schedule's (NoamLR)
    if warmup is None:
        warmup = args.get_warmup_steps(state.max_steps)
    if any(isinstance(c, TimeLimit) for c in trainer.callback_handler.callbacks) and steps < state.max_steps:
        # Taken as printed, it is accepted: a resumed run keeps its checkpoint's warm-up, and plans a new cool-down.
        longer = (
            "train longer: the same command with --resume_from_checkpoint true continues it for another "
            "--max_train_minutes, with the same warm-up"
        )
    else:
        longer = f"train longer with {'--max_steps' if args.max_steps > 0 else '--num_train_epochs'}"
    evaluations = [h["eval_bleu"] for h in state.log_history if "eval_bleu" in h]
    measured = [(f"validation BLEU {evaluations[-1]:.2f}", evaluations[-1])] if evaluations else []
    if test_bleu:
        measured.append((f"test BLEU {test_bleu['score']:.2f}", test_bleu["score"]))
    low = [text for text, score in measured if score < MIN_BLEU]
    updates = f"{steps:,} update{'s' if steps != 1 else ''}"
    if steps < warmup:
        scores = f" ({', '.join(text for text, _ in measured)})" if measured else ""
        return False, (
            f"Not a usable model: training stopped after {updates}, inside its learning-rate warm-up of "
            f"{warmup:,} updates, so it cannot have learned to translate{scores}; {longer}, or start again "
            f"(--overwrite_output_dir) with a shorter --warmup_steps."
        )
    if low:
        return False, (
            f"Not a usable model: after {updates} its {' and '.join(low)} (below {MIN_BLEU:g}: it does not "
            f"translate); {longer}, and check that --src_lang/--tgt_lang (or "
            f"--src_column/--tgt_column) name each sentence and its translation."
        )
    past = f"after {updates}, past its learning-rate warm-up of {warmup:,}"
    if measured:
        return True, f"Could have learned: {past}, {' and '.join(text for text, _ in measured)}."
    if nll is None:  # not measured (a caller without the validation split)
        return True, f"Could have learned: {past}; no BLEU or loss was measured."
    loss = f"its validation loss of {nll:.2f} per target token, against {unigram:.2f} for word frequencies alone"
    if nll >= unigram:
        return False, (
            f"Not a usable model: {past}, {loss}: it has not learned to use the source; {longer}, and check that "
            f"--src_lang/--tgt_lang (or --src_column/--tgt_column) name each sentence and its translation."
        )
    return True, (
        f"Could have learned: {past}, {loss}; no BLEU was measured (no evaluation, no test split), so whether it "
        f"translates is not known: --test_split, or `vanilla-transformer score` on its translations, tells."
    )


def unigram_nll(train_split, validation) -> float:
    """The validation loss (NLL per target token) of a model that predicts each target token from the training
    targets' token frequencies alone (add-one smoothed), whatever the source and the tokens before: the bar a model
    that has learned anything more clears. Over the same tokens as the model's loss (the labels, `</s>` included)."""

    def tokens(split) -> torch.Tensor:
        labels = split.with_format("arrow").select_columns(["labels"])[:].column("labels").combine_chunks()
        return torch.from_numpy(labels.values.to_numpy(zero_copy_only=False).astype("int64"))

    train, held_out = tokens(train_split), tokens(validation)
    counts = 1 + torch.bincount(train, minlength=1 + int(max(train.max(), held_out.max()))).double()
    return -float((counts[held_out].log() - counts.sum().log()).mean())


def validation_nll(model, trainer) -> float:
    """NLL per target token of `model` on the run's validation split, by teacher forcing (no decoding: seconds): the
    model's own loss, which is the plain cross-entropy, weighted by each batch's target tokens."""
    sums = torch.zeros(2, dtype=torch.float64)
    model.eval()
    with torch.no_grad():
        for batch in trainer.get_eval_dataloader():
            inputs = {k: v.to(model.device) for k, v in batch.items()}
            loss = model(**inputs, use_cache=False).loss
            tokens = inputs["labels"].ne(-100).sum()
            sums += torch.stack([loss.double().cpu() * tokens.cpu(), tokens.double().cpu()])
    return float(sums[0] / sums[1].clamp(min=1))


def keep_checkpoints(out_dir: Path, run_args: RunArguments, trainer) -> None:
    """`--keep_checkpoints`, once the run's models are written and scored: a checkpoint is three times its model's
    size (the weights, Adam's two moments), and a run keeps up to `save_total_limit` of them. `averaged` keeps the
    newest whole (a resume needs it) and the weights of the averaged checkpoints (or of those `--average_last` would
    take, in a run without a test split) and of the best one; `last` the newest only; `all` everything the Trainer's
    `save_total_limit` left (docs/training.md, "What a finished run keeps of its checkpoints", has what each leaves)."""
    if run_args.keep_checkpoints == "all":
        return
    keep = []
    if run_args.keep_checkpoints == "averaged":
        after = getattr(trainer.lr_scheduler, "cooldown_start", None)
        keep = last_complete_checkpoints(out_dir, run_args.average_last, after)
        keep += [trainer.state.best_model_checkpoint] if trainer.state.best_model_checkpoint else []
    pruned = prune_checkpoints(out_dir, keep_weights=keep)
    if pruned["deleted"] or pruned["weights"]:
        logger.info(
            "--keep_checkpoints %s: kept %s whole, the weights of %s, deleted %s: %.1f MB freed "
            "(--keep_checkpoints all keeps every checkpoint whole).",
            run_args.keep_checkpoints,
            ", ".join(pruned["kept"]),
            ", ".join(pruned["weights"]) or "none",
            ", ".join(pruned["deleted"]) or "none",
            pruned["freed_bytes"] / 1e6,
        )


def score_average(trainer, tokenizer, test, data_args, run_args, results: dict):
    """(results, model) of the average of the last `average_last` checkpoints (only those written during the
    learning-rate cool-down, when the run had one: see `average_last_checkpoints`), scored on the test split when
    there is one (`test`, else None); the final model's `results` gain an `averaged_model` entry. None without such
    checkpoints."""
    out_dir = Path(trainer.args.output_dir)
    after = getattr(trainer.lr_scheduler, "cooldown_start", None)
    averaged = average_last_checkpoints(out_dir, run_args.average_last, tokenizer, trainer.model.device, after=after)
    if averaged is None:
        return None
    model, names = averaged
    bleu = (
        None if test is None else score_test_split(model, tokenizer, test, data_args, run_args, out_dir / "averaged")
    )
    averaged_results = {
        **results,
        "bleu": {} if bleu is None else {"test": bleu},
        "checkpoint_averaging": {"num_checkpoints": len(names), "checkpoints": names, "after": after},
    }
    results["averaged_model"] = {"path": "averaged", "num_checkpoints": len(names), "bleu_test": bleu}
    return averaged_results, model


def draw_figures(log_history, cards, tokenizer, sentence: str, data_args) -> None:
    """The run's curves, and each card's figure: cross-attention of its own weights for the first validation sentence
    (a PNG pushed with the plots). The averaged model's card shows the curves of the run its checkpoints come from,
    copied beside it (a card only links files in its own directory). `cards`: (results, model, directory)."""
    out_dir = cards[0][2]
    curves = plot_history(log_history, out_dir)
    for card_results, card_model, directory in cards:
        if directory != out_dir:
            for name in curves:
                shutil.copy2(out_dir / name, directory / name)
        split = data_args.validation_split or data_args.train_split
        figure = write_attention_figure(card_model, tokenizer, sentence, directory, split=split)
        card_results["attention_figure"] = figure
        card_results["plots"] = curves + ([figure["file"]] if figure else [])


def plot_history(log_history: list[dict], out_dir: Path) -> list[str]:
    """PNG plots of training loss / NLL, learning rate and validation BLEU against the optimizer step."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed (the plot extra: pip install '.[plot]' in the clone): no plots.")
        return []
    series = {
        "loss.png": [
            ("loss", "train loss (label-smoothed)"),
            ("nll_loss", "train NLL"),
            ("eval_loss", "validation loss"),
            ("eval_nll_loss", "validation NLL"),
        ],
        "learning_rate.png": [("learning_rate", "learning rate")],
        "bleu.png": [("eval_bleu", "validation BLEU")],
    }
    written = []
    for name, keys in series.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        drawn = False
        for key, label in keys:
            points = [(h["step"], h[key]) for h in log_history if key in h and "step" in h]
            if points:
                ax.plot(*zip(*points), marker="." if len(points) < 50 else None, label=label)
                drawn = True
        if drawn:
            ax.set_xlabel("optimizer step")
            ax.legend()
            ax.grid(alpha=0.3)
            fig.tight_layout()
            fig.savefig(out_dir / name, dpi=100)
            written.append(name)
        plt.close(fig)
    return written


def collect_results(trainer, tokenizer, train_split, model_args, data_args, train_result, train_seconds) -> dict:
    """What the run was, in the schema of `vanilla_transformer.hub.model_card`; `bleu` is filled in by the caller."""
    args, config = trainer.args, trainer.model.config
    train_tokens = sum(int(n) for n in train_split["tgt_len"]) + sum(int(n) for n in train_split["src_len"])
    epochs = trainer.state.epoch or 0.0
    local = Path(data_args.dataset).exists()
    return {
        "src_lang": data_args.src_lang,
        "tgt_lang": data_args.tgt_lang,
        # A local directory is named by its folder, or as a known dataset (a clone's multi30k/data/task1/raw is
        # "multi30k"); a Hub dataset by its id, also in the card's metadata.
        "dataset": {
            "name": local_dataset_name(data_args.dataset) if local else data_args.dataset,
            **({"path": data_args.dataset} if local else {"hub_id": data_args.dataset}),
            "train_pairs": len(train_split),
            "splits": {
                "train": data_args.train_split,
                "validation": data_args.validation_split or None,
                "test": data_args.test_split,
            },
        },
        "preset": model_args.preset,
        "num_parameters": trainer.model.num_parameters(),
        "tokenizer": {"type": "BPE with byte fallback (shared source/target)", "vocab_size": len(tokenizer)},
        "decoding": {
            "num_beams": trainer.model.generation_config.num_beams,
            "length_penalty": trainer.model.generation_config.length_penalty,
            "length_penalty_form": getattr(trainer.model.generation_config, "length_penalty_form", None) or "length",
            "max_length": "source length + 50",
        },
        "bleu": {},
        "training": {
            "steps": trainer.state.global_step,
            "epochs": round(epochs, 3),
            "train_runtime_s": round(train_seconds, 1),
            # Source + target tokens (padding excluded) per second of training; evaluations are inside the runtime.
            "tokens_per_second": round(train_tokens * epochs / train_seconds, 1) if train_seconds else None,
            "hardware": describe_hardware(),
            "world_size": args.world_size,
            "topology": topology(args),
            # What the step ran in, and why (bf16="auto" follows the hardware; see vanilla_transformer.precision).
            "precision": {
                "mixed_precision": args.mixed_precision,
                "reason": args.precision_reason,
                "attention": config._attn_implementation,
                "torch_compile": args.torch_compile,
                # The recipe's `cpu_float32` options, when the run trained in float32 on a CPU (command-line options
                # won over them; the hyperparameters below are what the run used).
                "cpu_float32_options": args.recipe_cpu_float32,
            },
            # The recipe the run trained with (`name`; `default`: no --recipe, chosen by corpus size) and, if its
            # warm-up was fitted to the budget, {"warmup_steps": [recipe's, fitted], "lr_factor": [recipe's, for the
            # same peak]}.
            "recipe": {**(args.recipe or {}), "warmup_fitted": args.warmup_fitted},
            "final_train_loss": train_result.training_loss,
            "hyperparameters": hyperparameters(trainer),
        },
        "checkpoint_averaging": None,
        "best_checkpoint": trainer.state.best_model_checkpoint,
        "best_validation_bleu": trainer.state.best_metric,
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
    }


def hyperparameters(trainer) -> dict:
    """The recipe the run trained with, as the model card's training table shows it."""
    args, config = trainer.args, trainer.model.config
    return {
        "max_tokens": args.max_tokens,
        "warmup_steps": args.warmup_steps,
        "lr_factor": args.lr_factor,
        "lr_cooldown": args.lr_cooldown,
        # The updates where the cool-down ran (a timed run plans them during training), or None.
        "lr_cooldown_updates": [
            getattr(trainer.lr_scheduler, "cooldown_start", None),
            getattr(trainer.lr_scheduler, "cooldown_end", None),
        ]
        if args.lr_cooldown
        else None,
        "label_smoothing_factor": args.label_smoothing_factor,
        "lr_schedule": args.lr_schedule,
        "subword_split": args.subword_split,
        "bidirectional_steps": args.bidirectional_steps,
        "adam_betas": [args.adam_beta1, args.adam_beta2],
        "adam_epsilon": args.adam_epsilon,
        "dropout": config.dropout,
        "gradient_accumulation_steps": args.gradient_accumulation_steps,
        "seed": args.seed,
    }


def topology(args) -> dict:
    """Where the run trained: machines, processes on each (torchrun's LOCAL_WORLD_SIZE), and the most tokens per side
    that one update takes (`max_tokens` per batch, one batch per process and accumulation step)."""
    per_machine = int(os.environ.get("LOCAL_WORLD_SIZE", args.world_size))
    accumulation = args.gradient_accumulation_steps
    return {
        "machines": args.world_size // per_machine,
        "processes_per_machine": per_machine,
        "world_size": args.world_size,
        "gradient_accumulation_steps": accumulation,
        "max_tokens_per_update": args.max_tokens * args.world_size * accumulation if args.max_tokens else None,
    }


def describe_hardware() -> str:
    """The machine as its speed depends on it, for results.json and the card: the CPU's name, the instruction set
    torch's kernels use and its bfloat16 units (two CPUs with the same units can differ twofold in tokens per second:
    docs/performance.md, "Machines"), cores and threads, and the GPU."""
    cpu = ", ".join([platform.machine(), torch.backends.cpu.get_cpu_capability(), *cpu_bfloat16_units()])
    text = f"{cpu_model_name()} ({cpu}), {os.cpu_count()} CPU cores, torch threads {torch.get_num_threads()}"
    return text + (f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "")


def score_test_split(model, tokenizer, test, data_args: DataArguments, run_args: RunArguments, out_dir: Path) -> dict:
    """Test BLEU of `model` (beam search with its generation config); the hypotheses go to `out_dir`."""
    started = time.perf_counter()
    hypotheses = translate(model, tokenizer, test["source"], batch_size=run_args.test_batch_size)
    result = compute_bleu_with_lowercase(hypotheses, test["target"])
    seconds = round(time.perf_counter() - started, 1)
    result.update(sentences=len(hypotheses), seconds=seconds, split=data_args.test_split)
    (out_dir / f"{data_args.test_split}.hyp.{data_args.tgt_lang}").write_text("\n".join(hypotheses) + "\n")
    logger.info("Test BLEU (%s): %s", out_dir, result)
    return result


def average_last_checkpoints(out_dir: Path, k: int, tokenizer, device, after: int | None = None):
    """The average of the run's last `k` complete checkpoints (fewer if it has fewer) written after update `after`
    (the start of the learning-rate cool-down, when the run had one), saved with the tokenizer in `out_dir/averaged`:
    (the averaged model, the checkpoints' names), or None without such checkpoints.

    Why only the cool-down: checkpoints are written every `save_steps` updates, but a timed run's updates depend on
    the machine, several times fewer on a slow one, where the last `k` checkpoints reach back into the half-trained
    start of the run and their average scores below the final model (the recipe search's
    `multi30k_en_de_small_avx2` run: git show bbc37b1:bench/multi30k_search.md). The cool-down is the same fraction of every run, and the paper averages the last
    checkpoints of a run (section 6.1), not checkpoints from its start."""
    checkpoints = last_complete_checkpoints(out_dir, k, after)  # never one whose save did not finish
    window = f" written after update {after} (the learning-rate cool-down)" if after is not None else ""
    if not checkpoints:
        logger.warning("No checkpoint in %s%s: nothing to average.", out_dir, window)
        return None
    if len(checkpoints) < k:
        logger.warning(
            "Only %d checkpoints in %s%s: averaging %d, not %d.",
            len(checkpoints),
            out_dir,
            window,
            len(checkpoints),
            k,
        )
    averaged_dir = Path(average_checkpoints(checkpoints, str(out_dir / "averaged")))
    tokenizer.save_pretrained(averaged_dir)
    model = VanillaTransformerForConditionalGeneration.from_pretrained(averaged_dir).to(device)
    return model, [Path(c).name for c in checkpoints]


def write_results_and_card(directory: Path, config, results: dict, repo_id: str | None) -> None:
    (directory / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    logger.info("Results written to %s", directory / "results.json")
    # The local card is the one the Hub gets (the Trainer's generic card is replaced).
    write_model_card(directory, config, results, repo_id=repo_id)
