"""Table 3 of the paper, measured: each of its rows as a `train` run of a recipe, and the table they make.

The recipe's model is the base row. Each variation is the paper's change scaled to that base: a value the paper
changes is multiplied by its ratio to the paper's base (h 1/8 to 4, d_k 1/4 and 1/2, N 1/3 to 4/3, d_model and d_ff
1/2 and 2, P_drop and epsilon_ls 0 and 2, big's 2 x d_model, d_ff and h and 3 x P_drop), counts rounded to the nearest
integer and at least 1; where the paper derives d_k = d_v = d_model / h (rows A and C), so does the row. Learned
positions (E) are taken as they are. The rows are `configuration_vanilla_transformer.TABLE3_ROWS` (the paper's sizes),
read from that file's source so that the command checks every row before torch loads.

A row is a recipe file (the base recipe with the row's change, in its options and in its `cpu_float32` options, so a
float32 run scales from the float32 base) trained by `vanilla-transformer train` in a process of its own, exactly as
a user's `train`; its directory's `results.json` marks it finished, and a finished run is never trained again (a
run stopped part-way goes on from its newest checkpoint).
Standard library only (the command line imports it before torch); docs/table3.md describes the command.
"""

from __future__ import annotations

import ast
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..checkpoints import has_resume_state, last_checkpoint
from .preflight import option_table, preflight, read_recipe


CONFIG_FILE = Path(__file__).resolve().parents[1] / "configuration_vanilla_transformer.py"
GROUPS = ("A", "B", "C", "D", "E", "big")
# A train option and the config fields it sets (steps.build_config); the rows' changes are config fields.
OPTION_FIELDS = {
    "d_model": ("d_model",),
    "layers": ("encoder_layers", "decoder_layers"),
    "encoder_layers": ("encoder_layers",),
    "decoder_layers": ("decoder_layers",),
    "heads": ("encoder_attention_heads", "decoder_attention_heads"),
    "qk_head_dim": ("qk_head_dim",),
    "v_head_dim": ("v_head_dim",),
    "ffn_dim": ("encoder_ffn_dim", "decoder_ffn_dim"),
    "dropout": ("dropout",),
    "position_embedding_type": ("position_embedding_type",),
}
LABEL_SMOOTHING = "label_smoothing_factor"
TRAIN_LABEL_SMOOTHING = 0.1  # train's default, the paper's epsilon_ls
# The columns of the paper's table: (title, config field or option); a row shows the values that differ from base.
COLUMNS = (
    ("N", "encoder_layers"),
    ("d_model", "d_model"),
    ("d_ff", "encoder_ffn_dim"),
    ("h", "encoder_attention_heads"),
    ("d_k", "d_k"),
    ("d_v", "d_v"),
    ("P_drop", "dropout"),
    ("eps_ls", LABEL_SMOOTHING),
    ("positions", "position_embedding_type"),
)
MEASURES = (
    ("params", "params"),
    ("updates", "updates"),
    ("minutes", "minutes"),
    ("PPL (dev)", "validation_perplexity"),
    ("BLEU (dev)", "validation_bleu"),
    ("BLEU (test)", "test_bleu"),
)


def paper_rows() -> tuple[dict, dict, dict]:
    """(PRESETS, TABLE3_ROWS, TABLE3_LABEL_SMOOTHING) of the config file, by running its assignments of them alone
    (plain dicts): importing the file would import transformers and torch."""
    tree = ast.parse(CONFIG_FILE.read_text(encoding="utf-8"))
    names = ("PRESETS", "TABLE3_ROWS", "TABLE3_LABEL_SMOOTHING")
    body = [node for node in tree.body if isinstance(node, ast.Assign) and node.targets[0].id in names]
    namespace: dict = {}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(CONFIG_FILE), "exec"), {"dict": dict}, namespace)
    return tuple(namespace[name] for name in names)


def row_names(groups: list[str]) -> list[str]:
    """The rows of `groups` ("A".."E", "big", or one row such as "B1"), base first, in the paper's order."""
    _, rows, _ = paper_rows()
    chosen = {"base"}
    for group in groups:
        matching = [
            name for name in rows if name == group or (group in "ABCDE" and name[0] == group and name != "big")
        ]
        if not matching:
            raise ValueError(f"--rows {group!r} is no group or row of Table 3: choose from {', '.join(GROUPS)}.")
        chosen.update(matching)
    return [name for name in rows if name in chosen]


def base_values(recipe: dict) -> dict:
    """The base row's values: the recipe's preset with its model options, as config fields, plus its label smoothing."""
    presets, _, _ = paper_rows()
    values = dict(presets[recipe.get("preset", "small")])
    for option in ("layers", "heads", "ffn_dim", "d_model", "encoder_layers", "decoder_layers", "qk_head_dim"):
        if recipe.get(option) is not None:  # --layers first: --encoder_layers / --decoder_layers win over it
            values.update(dict.fromkeys(OPTION_FIELDS[option], recipe[option]))
    for option in ("v_head_dim", "dropout", "position_embedding_type"):
        if recipe.get(option) is not None:
            values[option] = recipe[option]
    values.setdefault("position_embedding_type", "sinusoidal")
    values[LABEL_SMOOTHING] = recipe.get(LABEL_SMOOTHING, TRAIN_LABEL_SMOOTHING)
    return values


def widths(values: dict) -> tuple:
    """(d_k, d_v) of the encoder's attention; None where d_model / h is not an integer."""
    derived = values["d_model"] / values["encoder_attention_heads"]
    derived = int(derived) if derived == int(derived) else None
    return values.get("qk_head_dim") or derived, values.get("v_head_dim") or derived


def scaled_change(name: str, base: dict) -> dict:
    """Row `name`'s change (config fields, and `label_smoothing_factor`) scaled from the paper's base to `base`."""
    presets, rows, label_smoothing = paper_rows()
    paper = {**presets["base"], LABEL_SMOOTHING: TRAIN_LABEL_SMOOTHING, "qk_head_dim": 64, "v_head_dim": 64}
    change = dict(rows[name])
    if name in label_smoothing:
        change[LABEL_SMOOTHING] = label_smoothing[name]
    scaled = {}
    for field, value in change.items():
        if value == paper.get(field):
            continue  # big's N: the paper's base value
        if isinstance(value, str):
            scaled[field] = value
        elif isinstance(value, float):
            scaled[field] = round(base[field] * value / paper[field], 6)
        else:
            reference = widths(base)[field == "v_head_dim"] if field.endswith("head_dim") else base[field]
            scaled[field] = max(1, round(reference * value / paper[field]))
    return scaled


def row_values(name: str, base: dict) -> dict:
    """The row's values (config fields and label smoothing); ValueError naming the row where it cannot be built."""
    change = scaled_change(name, base)
    values = {**base, **change}
    d_k, d_v = widths(values)
    if d_k is None or d_v is None:
        raise ValueError(
            f"--rows: row {name} cannot be built: d_model {values['d_model']} is not divisible by its "
            f"{values['encoder_attention_heads']} heads (d_k = d_v = d_model / h, section 3.2.2)."
        )
    # The decoder's fields follow the encoder's (the paper's N, h, d_ff are one value each).
    return {**values, "d_k": d_k, "d_v": d_v, "changed": [field for field in FIELD_OPTIONS if field in change]}


# A changed config field (or the label smoothing) -> the train options (recipe keys) that set it.
FIELD_OPTIONS = {
    "encoder_layers": ("encoder_layers", "decoder_layers"),
    "d_model": ("d_model",),
    "encoder_attention_heads": ("heads",),
    "qk_head_dim": ("qk_head_dim",),
    "encoder_ffn_dim": ("ffn_dim",),
    "dropout": ("dropout",),
    LABEL_SMOOTHING: (LABEL_SMOOTHING,),
    "position_embedding_type": ("position_embedding_type",),
}


def row_options(values: dict) -> dict:
    """The train options (recipe keys) that give the row's changed values."""
    options = {}
    for field in values["changed"]:
        for option in FIELD_OPTIONS[field]:
            options[option] = values[OPTION_FIELDS.get(option, (option,))[0]]
    return options


def row_recipe(recipe: dict, cpu_float32: dict, name: str) -> dict:
    """The recipe file of row `name`: the base recipe with the row's options; where its `cpu_float32` options set a
    value the row changes, that value scaled from the float32 base the same way."""
    options = row_options(row_values(name, base_values(recipe)))
    float32 = dict(cpu_float32)
    for key in set(options) & set(cpu_float32):
        float32[key] = row_options(row_values(name, base_values({**recipe, **cpu_float32})))[key]
    return {**recipe, **options, **({"cpu_float32": float32} if float32 else {})}


# ------------------------------------------------------------------------------------------------ the runs


def budget_of(max_steps: int | None, max_train_minutes: float | None) -> dict:
    return {"max_steps": max_steps} if max_steps else {"max_train_minutes": max_train_minutes}


def budget_options(budget: dict) -> list[str]:
    """Every row trains the same number of updates (the paper's train-steps column), or the same minutes."""
    if "max_steps" in budget:
        steps = str(budget["max_steps"])  # an evaluation at the last update: its validation BLEU and perplexity
        return ["--max_steps", steps, "--max_train_minutes", "none", "--eval_strategy", "steps", "--eval_steps", steps]
    return ["--max_train_minutes", str(budget["max_train_minutes"])]


def plan(args) -> dict:
    """Everything the table needs, checked before anything is written or trained: the recipe, the rows (each
    buildable), the budget, and an output directory that holds no table of another recipe or budget."""
    known = {option["dest"] for group in option_table() for option in group["options"]}
    recipe, cpu_float32 = read_recipe(args.recipe, known)
    names = row_names([group.strip() for group in args.rows.split(",") if group.strip()])
    recipes = {name: row_recipe(recipe, cpu_float32, name) for name in names}  # ValueError naming a row
    budget = budget_of(args.max_steps, args.max_train_minutes)
    out = Path(args.output_dir)
    manifest = {"recipe": {"name": args.recipe, "options": {**recipe, "cpu_float32": cpu_float32}}, "budget": budget}
    previous = out / "table3.json"
    if previous.is_file():
        held = json.loads(previous.read_text(encoding="utf-8"))
        for key, flag in (("budget", budget_flag(held["budget"])), ("recipe", f"--recipe {held['recipe']['name']}")):
            if held[key] != manifest[key]:
                raise ValueError(
                    f"--output_dir {str(out)!r} holds a table of {flag}, not {_asked(key, args, budget)}: a table "
                    f"from another {key} is never mixed in; pass another --output_dir."
                )
    elif out.exists() and any(out.iterdir()):
        raise ValueError(f"--output_dir {str(out)!r} holds files but no table3.json: pass a new or empty directory.")
    runs = [(name, seed) for name in names for seed in range(1, args.seeds + 1)]
    unfinished = [run_dir(out, *run) for run in runs if not (run_dir(out, *run) / "results.json").is_file()]
    if unfinished:  # the data, languages and options as `train` checks them (an unfinished run's files go)
        again = ["--overwrite_output_dir", "true"] if unfinished[0].exists() else []
        preflight(["--recipe", args.recipe, "--output_dir", str(unfinished[0]), *again, *budget_options(budget)])
    return {"manifest": manifest, "names": names, "recipes": recipes, "runs": runs, "out": out}


def budget_flag(budget: dict) -> str:
    key, value = next(iter(budget.items()))
    return f"--{key} {value}"


def _asked(key: str, args, budget: dict) -> str:
    return budget_flag(budget) if key == "budget" else f"--recipe {args.recipe}"


def run_dir(out: Path, name: str, seed: int) -> Path:
    return out / name / f"seed-{seed}"


def train_command(out: Path, name: str, seed: int, budget: dict) -> list[str]:
    """The row's `vanilla-transformer train` command line: its recipe file, the seed, its directory, the budget."""
    return [
        *(sys.executable, "-m", "vanilla_transformer_cli", "train"),
        *("--recipe", str(out / "recipes" / f"{name}.json"), "--seed", str(seed)),
        *("--output_dir", str(run_dir(out, name, seed)), *budget_options(budget)),
    ]


def say(line: str) -> None:
    """One line on stdout in one write: the `--jobs` threads print at once, and print's separate newline interleaves."""
    print(line + "\n", end="", flush=True)


def resumable_checkpoint(directory: Path, budget: dict) -> str | None:
    """The checkpoint a stopped run of the table goes on from: the newest complete one of its directory with its
    optimizer state, where the budget is updates (`train --resume_from_checkpoint true` then ends with the weights of
    a run never stopped). None for a budget of minutes (a resumed timed run would train its minutes again) or a run
    stopped before its first checkpoint."""
    if "max_steps" not in budget:
        return None
    checkpoint = last_checkpoint(directory)
    return checkpoint if checkpoint is not None and has_resume_state(checkpoint) else None


def train_row(out: Path, name: str, seed: int, budget: dict, threads: int | None) -> None:
    """One run of the table: a finished run (its results.json) is left alone; one stopped part-way goes on from its
    newest checkpoint (`resumable_checkpoint`), or, without one, is removed and trained again from the start, so that
    every run of the table gives what one uninterrupted `train` gives."""
    directory = run_dir(out, name, seed)
    if (directory / "results.json").is_file():
        say(f"table3: {name} seed {seed}: finished before, not trained again")
        return
    checkpoint = resumable_checkpoint(directory, budget)
    if checkpoint is None and directory.exists():
        shutil.rmtree(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    log = out / "logs" / f"{name}-seed-{seed}.log"
    log.parent.mkdir(exist_ok=True)
    command = train_command(out, name, seed, budget)
    if checkpoint is None:
        say(f"table3: {name} seed {seed}: training ({log})")
    else:
        command += ["--resume_from_checkpoint", "true"]
        say(f"table3: {name} seed {seed}: going on from {Path(checkpoint).name} ({log})")
    with open(log, "w" if checkpoint is None else "a", encoding="utf-8") as handle:
        status = subprocess.run(command, stdout=handle, stderr=subprocess.STDOUT, env=env).returncode
    if status != 0 or not (directory / "results.json").is_file():
        raise RuntimeError(f"row {name} seed {seed}: train exited with status {status}; its log: {log}")


def run_result(directory: Path) -> dict:
    """What the table shows of one finished run: its results.json and the last evaluation of its trainer_state.json
    (validation BLEU and NLL per target token, of the final model when the budget is updates)."""
    results = json.loads((directory / "results.json").read_text(encoding="utf-8"))
    history = json.loads((directory / "trainer_state.json").read_text(encoding="utf-8"))["log_history"]
    evaluations = [entry for entry in history if "eval_nll_loss" in entry]
    last = evaluations[-1] if evaluations else {}
    test = results["bleu"].get("test")
    return {
        "params": results["num_parameters"],
        "updates": results["training"]["steps"],
        "minutes": round(results["training"]["train_runtime_s"] / 60, 2),
        "validation_perplexity": round(math.exp(last["eval_nll_loss"]), 3) if last else None,
        "validation_bleu": round(last["eval_bleu"], 2) if "eval_bleu" in last else None,
        "test_bleu": round(test["score"], 2) if test else None,
        "machine": results["training"]["hardware"],
        "precision": {"no": "float32", "bf16": "bfloat16"}.get(
            precision := results["training"]["precision"]["mixed_precision"], precision
        ),
    }


def summary(values: list) -> dict:
    """Mean and spread (sample standard deviation; 0 for one seed) over seeds."""
    values = [v for v in values if v is not None]
    if not values:
        return {"mean": None, "spread": None}
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return {"mean": round(statistics.fmean(values), 3), "spread": round(spread, 3)}


def finished_runs(out: Path, name: str, seeds: int) -> list[Path] | None:
    """The finished runs of row `name`: None unless seeds 1 to `seeds` all finished; then those and the further seeds
    finished in the directory before (`--rows base --seeds 3`, then the variations with `--seeds 2`: the base row
    keeps its three)."""
    directories = [run_dir(out, name, seed) for seed in range(1, seeds + 1)]
    if not all((d / "results.json").is_file() for d in directories):
        return None
    while (run_dir(out, name, len(directories) + 1) / "results.json").is_file():
        directories.append(run_dir(out, name, len(directories) + 1))
    return directories


def table_rows(work: dict, base: dict) -> list[dict]:
    """One entry per row whose every seed finished: its values, what changed, and each measure over seeds."""
    entries = []
    for name in work["names"]:
        directories = finished_runs(work["out"], name, work["seeds"])
        if directories is None:
            continue
        runs = [run_result(d) for d in directories]
        values = row_values(name, base)
        entries.append(
            {
                "row": name,
                "changed": {key: values[key] for key in values["changed"]},
                "values": {field: values[field] for _, field in COLUMNS},
                **{key: summary([run[key] for run in runs]) for _, key in MEASURES},
                "seeds": [{"seed": i + 1, **run} for i, run in enumerate(runs)],
            }
        )
    return entries


def _cell(measure: dict, digits: int) -> str:
    if measure["mean"] is None:
        return "-"
    mean = f"{measure['mean']:,.{digits}f}"
    return mean if not measure["spread"] else f"{mean} ± {measure['spread']:,.{digits}f}"


def write_table(work: dict, entries: list[dict], base: dict) -> None:
    """table3.md in the paper's layout (a variation shows only the values it changes), table3.jsonl, table3.png."""
    out, manifest = work["out"], work["manifest"]
    machines = sorted({run["machine"] + ": " + str(run["precision"]) for e in entries for run in e["seeds"]})
    header = [title for title, _ in COLUMNS] + [title for title, _ in MEASURES]
    lines = [
        "# Table 3, measured",
        "",
        f"Recipe `{manifest['recipe']['name']}` (the base row's model and training); budget "
        f"`{budget_flag(manifest['budget'])}` per run; seeds 1-{work['seeds']} (a row trained with more before keeps "
        f"them); machine: {'; '.join(machines)}.",
        "Each measure is the mean over seeds ± their standard deviation; a variation shows the values it changes.",
        "",
        "| row | seeds | " + " | ".join(header) + " |",
        "| --- " * (len(header) + 2) + "|",
    ]
    digits = {"params": 0, "updates": 0, "minutes": 1, "validation_perplexity": 2}
    for entry in entries:
        shown = {f for f in entry["values"] if entry["row"] == "base" or _differs(entry, f, base)}
        cells = [str(entry["values"][field]) if field in shown else "" for _, field in COLUMNS]
        cells += [_cell(entry[key], digits.get(key, 2)) for _, key in MEASURES]
        lines.append(f"| {entry['row']} | {len(entry['seeds'])} | " + " | ".join(cells) + " |")
    (out / "table3.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(out / "table3.jsonl", "w", encoding="utf-8") as handle:
        for entry in entries:
            handle.write(json.dumps({**entry, **manifest, "seeds_per_row": work["seeds"]}) + "\n")
    draw_figure(out, entries, manifest)


def _differs(entry: dict, field: str, base: dict) -> bool:
    reference = {**base, "d_k": widths(base)[0], "d_v": widths(base)[1]}
    return entry["values"][field] != reference.get(field)


def draw_figure(out: Path, entries: list[dict], manifest: dict) -> None:
    """table3.png: each row's test BLEU (mean, and its seed spread as an error bar) against the base's, whose mean
    and spread are the line and band. Drawn only where matplotlib is installed (the `plot` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    shown = [e for e in entries if e["test_bleu"]["mean"] is not None]
    if not shown:
        return
    figure, axes = plt.subplots(figsize=(max(4, 0.45 * len(shown) + 1.5), 3.5))
    base = next((e for e in shown if e["row"] == "base"), None)
    if base is not None:
        mean, spread = base["test_bleu"]["mean"], base["test_bleu"]["spread"]
        axes.axhspan(mean - spread, mean + spread, color="0.85")
        axes.axhline(mean, color="0.4", linewidth=1)
    positions = range(len(shown))
    means = [e["test_bleu"]["mean"] for e in shown]
    axes.errorbar(positions, means, yerr=[e["test_bleu"]["spread"] for e in shown], fmt="o", capsize=3)
    axes.set_xticks(list(positions), [e["row"] for e in shown], rotation=90)
    axes.set_ylabel("test BLEU")
    axes.set_title(f"{manifest['recipe']['name']}, {budget_flag(manifest['budget'])}", fontsize=9)
    figure.tight_layout()
    figure.savefig(out / "table3.png", dpi=120)
    plt.close(figure)


def run_table(args, work: dict) -> Path:
    """The command, once `plan(args)` has made every check and returned `work`: the row recipes and table3.json,
    the runs (`--jobs` at a time), the table rewritten as rows finish. Returns table3.md."""
    work["seeds"] = args.seeds
    out, manifest = work["out"], work["manifest"]
    (out / "recipes").mkdir(parents=True, exist_ok=True)
    for name, recipe in work["recipes"].items():
        (out / "recipes" / f"{name}.json").write_text(json.dumps(recipe, indent=1) + "\n", encoding="utf-8")
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "jobs": args.jobs}
    (out / "table3.json").write_text(json.dumps({**manifest, "machine": machine}, indent=1) + "\n", encoding="utf-8")
    base = base_values({key: value for key, value in manifest["recipe"]["options"].items() if key != "cpu_float32"})
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    threads = max(1, cores // args.jobs) if args.jobs > 1 else None
    started = time.perf_counter()

    def one(run):
        train_row(out, *run, manifest["budget"], threads)
        write_table(work, table_rows(work, base), base)

    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in [pool.submit(one, run) for run in work["runs"]]:
            future.result()
    write_table(work, table_rows(work, base), base)
    print(f"table3: {len(work['runs'])} runs in {(time.perf_counter() - started) / 60:.1f} minutes", flush=True)
    return out / "table3.md"
