"""Publishing and using a trained model end to end, against the loopback Hub (tests/support/hub_server.py).

`train.py --push_to_hub` trains a tiny model on 500 real Multi30k pairs: the Trainer commits during training
(`hub_strategy="every_save"`) and at the end, and `hub.push_run` publishes the final model with its card, plots
and remote code. Then: the repo holds exactly the expected files; in this process the Auto classes load it
bit-identically; in a subprocess with a fresh HF_HOME, where `vanilla_transformer` cannot be imported, the remote
code loads with `trust_remote_code=True` (AutoConfig, AutoModel, AutoModelForSeq2SeqLM, pipeline("translation"))
and computes the same numbers, and without it fails at once with a clear error; the card's metadata parses and its
BLEU is the run's. Errors before any upload: no token, wrong token, another user's namespace, offline client.
"""

import hashlib
import importlib
import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import sacrebleu
import torch
import yaml
from conftest import HUB
from helpers import BLOCK_PACKAGE, read_multi30k, tiny_options
from huggingface_hub import HfApi, ModelCard, constants, snapshot_download
from huggingface_hub.errors import RepositoryNotFoundError
from safetensors.torch import save_file
from transformers import AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel
from vanilla_transformer.commands import main as cli_main
from vanilla_transformer.hub.push import DEFAULT_COMMIT_MESSAGE, ensure_repo, files_to_push, push_run


ROOT = Path(__file__).resolve().parents[1]
TEST_SPLIT = "test_2016_flickr"
STEPS, SAVE_STEPS = 150, 50

# What a published run holds, and nothing else (README.md: the card; .gitattributes: written by the Hub).
EXPECTED_FILES = {
    ".gitattributes",
    "README.md",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "configuration_vanilla_transformer.py",
    "modeling_vanilla_transformer.py",
    "loss_vanilla_transformer.py",
    "pipeline_vanilla_transformer.py",
    "generation_vanilla_transformer.py",
    "search_vanilla_transformer.py",
    "tokenizer.json",
    "tokenizer_config.json",
    "results.json",
}
# What train.py leaves in its output directory that must not be published.
TRAINING_LEFTOVERS = ["checkpoint-50", "tokenizer", "training_args.bin", "trainer_state.json", f"{TEST_SPLIT}.hyp.de"]


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def online():
    """The loopback Hub, with the client online for this whole module (the `hub` fixture does it per test)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(constants, "HF_HUB_OFFLINE", False)
        yield HUB


def load_train_py():
    """The training command's module (`vanilla-transformer train`, `python train.py`); its `train()` returns the
    results."""
    return importlib.import_module("vanilla_transformer.training.train")


def train_args(data_dir, output_dir, *extra):
    return [
        "--dataset",
        str(data_dir),
        "--output_dir",
        str(output_dir),
        "--test_split",
        TEST_SPLIT,
        "--vocab_size",
        "600",
        *tiny_options(),
        "--dropout",
        "0.0",
        "--max_steps",
        str(STEPS),
        "--warmup_steps",
        "20",
        "--max_tokens",
        "800",
        "--save_strategy",
        "steps",
        "--save_steps",
        str(SAVE_STEPS),
        "--logging_steps",
        "25",
        # No TensorBoard: the Trainer's background pushes upload its output_dir, and a live event file that grows
        # during the upload makes that push fail silently (observed: LFS verify 404, the step's commit missing).
        "--report_to",
        "none",
        "--use_cpu",
        "--disable_tqdm",
        "true",
        "--test_batch_size",
        "20",
        # Every checkpoint stays whole: the tests compare the Trainer's pushes with them.
        "--keep_checkpoints",
        "all",
        *extra,
    ]


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """500 training pairs, 20 validation and 20 test pairs of Multi30k EN-DE (a temporary subset, outside the repo)."""
    path = tmp_path_factory.mktemp("multi30k_subset")
    for split, size in (("train", 500), ("val", 20), (TEST_SPLIT, 20)):
        for lang in ("en", "de"):
            (path / f"{split}.{lang}").write_text(
                "\n".join(read_multi30k(f"{split}.{lang}.gz", size)) + "\n", encoding="utf-8"
            )
    return path


@pytest.fixture(scope="module")
def run(online, data_dir, tmp_path_factory):
    """`python train.py ... --push_to_hub --hub_model_id tester/run-xxxx --hub_strategy every_save`, in process."""
    train = load_train_py()
    repo = f"{online.user}/{unique('run')}"
    out = tmp_path_factory.mktemp("run")
    results = train.train(
        train_args(
            data_dir,
            out,
            "--push_to_hub",
            "--hub_model_id",
            repo,
            "--hub_strategy",
            "every_save",
            "--hub_always_push",
            "true",
        )
    )
    return {"repo": repo, "out": out, "results": results}


@pytest.fixture(scope="module")
def reference(run, tmp_path_factory):
    """What the published model computes, from the local output directory: the subprocess must match it."""
    out = run["out"]
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = VanillaTransformerForConditionalGeneration.from_pretrained(out).eval()
    base = VanillaTransformerModel.from_pretrained(out).eval()
    sources = read_multi30k(f"{TEST_SPLIT}.en.gz", 6)
    targets = read_multi30k(f"{TEST_SPLIT}.de.gz", 6)
    batch = tokenizer(sources, padding=True, return_tensors="pt")
    decoder = tokenizer(text_target=targets, padding=True, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        tensors = {
            "ids": batch["input_ids"],
            "mask": batch["attention_mask"],
            "dec": decoder,
            "logits": model(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder
            ).logits,
            "hidden": base(
                input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder
            ).last_hidden_state,
            "generated": model.generate(**batch),  # the shipped generation config: beam 4, length penalty 0.6
        }
        texts = [
            tokenizer.decode(model.generate(**tokenizer(s, return_tensors="pt"))[0], skip_special_tokens=True)
            for s in sources
        ]
    path = tmp_path_factory.mktemp("reference") / "expected.safetensors"
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
    return {"path": path, "tensors": tensors, "sources": sources, "texts": texts}


# ------------------------------------------------------------------------------------------------ the push


def test_trainer_commits_during_and_at_the_end_then_push_run(run):
    api = HfApi()
    commits = api.list_repo_commits(run["repo"])  # newest first
    assert [c.title for c in commits] == [
        DEFAULT_COMMIT_MESSAGE,
        "Model save",  # push_run; the Trainer's push at the end (train.py's save_model)
        *[f"Training in progress, step {s}" for s in range(STEPS, 0, -SAVE_STEPS)],
        "initial commit",
    ]
    # The last commit is push_run's, and train.py reports it.
    assert run["results"]["hub_commit"].endswith("/commit/" + commits[0].commit_id)
    # Each push during training carries the weights of its step's checkpoint.
    for commit, step in zip(commits[2:-1], range(STEPS, 0, -SAVE_STEPS)):
        files = {f.path: f for f in api.list_repo_tree(run["repo"], revision=commit.commit_id)}
        weights = (run["out"] / f"checkpoint-{step}" / "model.safetensors").read_bytes()
        assert files["model.safetensors"].lfs.sha256 == hashlib.sha256(weights).hexdigest(), step
        assert "training_args.bin" in files
    # The Trainer's end-of-training push uploaded its whole output_dir, training files included, which
    # push_run then removed: what the final revision does not hold was there before.
    before = set(api.list_repo_files(run["repo"], revision=commits[1].commit_id))
    assert {"training_args.bin", "tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json"} <= before


def test_prune_deletes_only_training_files(run, hub, tmp_path):
    api = HfApi()
    repo = api.create_repo(f"{hub.user}/{unique('prune')}").repo_id
    junk = [
        "runs/Nov21_10-00-00_host/events.out.tfevents.1.host.1.0",
        "checkpoint-50/optimizer.pt",
        "last-checkpoint/scheduler.pt",
        "training_args.bin",
        "trainer_state.json",
        "test.hyp.de",
        "all_results.json",
        "pytorch_model.bin",
    ]
    for path in [*junk, "NOTES.md"]:
        api.upload_file(path_or_fileobj=b"x", path_in_repo=path, repo_id=repo)
    published = EXPECTED_FILES | set(run["results"]["plots"])
    push_run(run["out"], repo, prune=False)
    assert set(api.list_repo_files(repo)) == published | set(junk) | {"NOTES.md"}
    push_run(run["out"], repo)
    assert set(api.list_repo_files(repo)) == published | {"NOTES.md"}  # a file of the user's own is kept
    # Locally too, only the listed files are taken: a TensorBoard run directory is not.
    copy = tmp_path / "run"
    shutil.copytree(run["out"], copy, ignore=shutil.ignore_patterns("checkpoint-*"))
    (copy / "runs" / "x").mkdir(parents=True)
    (copy / "runs" / "x" / "events.out.tfevents.1").write_bytes(b"x")
    assert set(files_to_push(copy)) == published - {".gitattributes", "README.md"}


def test_repo_holds_exactly_the_expected_files(run, tmp_path):
    out, results = run["out"], run["results"]
    assert results["plots"] and all(name.endswith(".png") for name in results["plots"])
    expected = EXPECTED_FILES | set(results["plots"])
    assert set(HfApi().list_repo_files(run["repo"])) == expected
    for leftover in TRAINING_LEFTOVERS:  # present locally: their absence from the repo is a decision
        assert (out / leftover).exists(), leftover
    # Every published file is the local one, byte for byte (the card is rendered at push time).
    local = Path(snapshot_download(run["repo"], local_dir=tmp_path / "snapshot"))
    for name in expected - {".gitattributes", "README.md"}:
        assert (local / name).read_bytes() == (out / name).read_bytes(), name
    config = json.loads((local / "config.json").read_text())
    assert set(config["auto_map"]) == {"AutoConfig", "AutoModel", "AutoModelForSeq2SeqLM"}
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_vanilla_transformer.TranslationPipeline"
    info = HfApi().model_info(run["repo"], files_metadata=True)
    assert info.config["auto_map"] == config["auto_map"]
    assert next(s for s in info.siblings if s.rfilename == "model.safetensors").lfs is not None


def test_the_card_pushed_is_the_one_in_the_output_directory(run, hub, tmp_path):
    # push_run writes the card (and results given from elsewhere) where it uploads from: upload_folder.
    plain = tmp_path / "plain"
    shutil.copytree(run["out"], plain, ignore=shutil.ignore_patterns("checkpoint-*", "results.json", "README.md"))
    (tmp_path / "elsewhere.json").write_text(json.dumps(run["results"]) + "\n", encoding="utf-8")
    repo = f"{hub.user}/{unique('local-card')}"
    push_run(plain, repo, results=tmp_path / "elsewhere.json")
    local = Path(snapshot_download(repo, local_dir=tmp_path / "snapshot"))
    published = set(HfApi().list_repo_files(repo)) - {".gitattributes"}
    assert {"README.md", "results.json"} <= published
    for name in published:
        assert (local / name).read_bytes() == (plain / name).read_bytes(), name
    assert (plain / "results.json").read_bytes() == (tmp_path / "elsewhere.json").read_bytes()
    assert f'model="{repo}"' in (plain / "README.md").read_text(encoding="utf-8")  # rendered for this repo


def test_card_metadata_parses_and_its_bleu_is_the_runs(run):
    out, results = run["out"], run["results"]
    score = results["bleu"]["test"]["score"]
    # The run's BLEU, recomputed here from its hypotheses with sacreBLEU: not zero, so equality below means something.
    hypotheses = (out / f"{TEST_SPLIT}.hyp.de").read_text(encoding="utf-8").split("\n")[:-1]
    references = read_multi30k(f"{TEST_SPLIT}.de.gz", 20)
    assert sacrebleu.corpus_bleu(hypotheses, [references]).score == pytest.approx(score, abs=1e-9) and score > 0
    assert json.loads((out / "results.json").read_text())["bleu"]["test"]["score"] == score

    card = ModelCard.load(run["repo"])  # from the Hub; parsing model-index metadata is strict
    assert card.data.library_name == "transformers" and card.data.pipeline_tag == "translation"
    assert card.data.language == ["en", "de"]
    [result] = card.data.eval_results
    assert (result.metric_type, result.metric_value, result.dataset_split) == ("bleu", score, TEST_SPLIT)
    assert result.metric_args == {"signature": results["bleu"]["test"]["signature"]}
    # The front matter as plain YAML, independently of huggingface_hub's parser, and as the Hub indexed it.
    front = yaml.safe_load(re.match(r"---\n(.*?)\n---\n", card.content, re.S).group(1))
    assert front["model-index"][0]["results"][0]["metrics"][0]["value"] == score
    assert HfApi().model_info(run["repo"]).card_data.eval_results == card.data.eval_results
    assert f"| {results['bleu']['test']['split']} | {score:.2f} |" in card.text  # the card's results table


def test_card_without_results(run, hub, tmp_path):
    # A save_pretrained directory with its tokenizer but no results.json (e.g. before evaluation).
    plain = tmp_path / "plain"
    shutil.copytree(
        run["out"], plain, ignore=shutil.ignore_patterns("checkpoint-*", "results.json", "README.md", "*.png")
    )
    repo = f"{hub.user}/{unique('no-results')}"
    push_run(plain, repo)
    card = ModelCard.load(repo)
    assert "No evaluation results were published" in card.text
    assert card.data.library_name == "transformers" and not card.data.eval_results
    assert "results.json" not in HfApi().list_repo_files(repo)
    # A README.md of the user's own is published as it is; results given as a dict are published with the card.
    (plain / "README.md").write_text("---\nlicense: mit\n---\n# My own card\n", encoding="utf-8")
    push_run(plain, repo)
    assert ModelCard.load(repo).text.strip() == "# My own card"
    push_run(plain, repo, results=run["results"])
    assert ModelCard.load(repo).data.eval_results[0].metric_value == run["results"]["bleu"]["test"]["score"]
    local = HfApi().hf_hub_download(repo, "results.json", local_dir=tmp_path / "download")
    assert json.loads(Path(local).read_text())["bleu"] == run["results"]["bleu"]


def test_train_py_pushes_to_a_new_branch(hub, data_dir, tmp_path):
    train = load_train_py()
    repo = f"{hub.user}/{unique('branch')}"
    args = train_args(data_dir, tmp_path / "out", "--push_to_hub", "--hub_model_id", repo, "--hub_revision", "dev")
    args[args.index("--max_steps") + 1], args[args.index("--save_steps") + 1] = "20", "10"
    results = train.train(args)
    commits = HfApi().list_repo_commits(repo, revision="dev")
    assert results["hub_commit"].endswith(commits[0].commit_id)
    assert "Training in progress, step 10" in [c.title for c in commits]
    assert HfApi().list_repo_files(repo) == [".gitattributes"]


# ------------------------------------------------------------------------------------------------ using it


def test_auto_classes_in_this_process_are_bit_identical(run, reference):
    tensors = reference["tensors"]
    tokenizer = AutoTokenizer.from_pretrained(run["repo"])
    local_tokenizer = AutoTokenizer.from_pretrained(run["out"])
    assert tokenizer(reference["sources"])["input_ids"] == local_tokenizer(reference["sources"])["input_ids"]
    model = AutoModelForSeq2SeqLM.from_pretrained(run["repo"]).eval()
    assert type(model) is VanillaTransformerForConditionalGeneration  # the installed package's class
    with torch.no_grad():
        inputs = {"input_ids": tensors["ids"], "attention_mask": tensors["mask"]}
        logits = model(**inputs, decoder_input_ids=tensors["dec"]).logits
        assert torch.equal(logits, tensors["logits"])
        assert torch.equal(model.generate(**inputs), tensors["generated"])
    base = AutoModel.from_pretrained(run["repo"]).eval()
    assert type(base) is VanillaTransformerModel


@pytest.fixture(scope="module")
def remote_user(online, run, reference, tmp_path_factory):
    """A user's process: fresh HF_HOME, online, `vanilla_transformer` not importable, no TTY on stdin."""
    home = tmp_path_factory.mktemp("user")
    repo, expected = run["repo"], str(reference["path"])
    script = BLOCK_PACKAGE + textwrap.dedent(
        f"""
        import json, time, torch
        from safetensors.torch import load_file
        from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, pipeline
        exp = load_file({expected!r})
        report = {{}}
        start = time.monotonic()
        try:
            AutoModelForSeq2SeqLM.from_pretrained({repo!r})
            report["no_trust"] = {{"error": None}}
        except Exception as error:
            report["no_trust"] = {{"error": type(error).__name__, "message": str(error)}}
        report["no_trust"]["seconds"] = time.monotonic() - start
        name = lambda obj: type(obj).__module__ + "." + type(obj).__name__
        report["config"] = name(AutoConfig.from_pretrained({repo!r}, trust_remote_code=True))
        base = AutoModel.from_pretrained({repo!r}, trust_remote_code=True).eval()
        model = AutoModelForSeq2SeqLM.from_pretrained({repo!r}, trust_remote_code=True).eval()
        report["base"], report["model"] = name(base), name(model)
        with torch.no_grad():
            inputs = dict(input_ids=exp["ids"], attention_mask=exp["mask"], decoder_input_ids=exp["dec"])
            hidden = base(**inputs).last_hidden_state
            logits = model(**inputs).logits
            generated = model.generate(input_ids=exp["ids"], attention_mask=exp["mask"])
        report["hidden_equal"] = torch.equal(hidden, exp["hidden"])
        report["logits_equal"] = torch.equal(logits, exp["logits"])
        report["logits_max_diff"] = (logits - exp["logits"]).abs().max().item()
        report["generated_equal"] = (generated.shape == exp["generated"].shape
                                     and torch.equal(generated, exp["generated"]))
        try:
            pipe = pipeline("translation", model={repo!r}, trust_remote_code=True, device="cpu")
            report["pipeline"] = name(pipe)
            report["pipeline_texts"] = [r["translation_text"] for r in pipe({reference["sources"]!r})]
        except Exception as error:
            report["pipeline_error"] = repr(error)
        report["vanilla_modules"] = [m for m in sys.modules if m.startswith("vanilla_transformer")]
        print("\\n@@report@@" + json.dumps(report))  # on its own line: transformers' prompt has no newline
        """
    )
    env = {**online.client_env(home / "hf_home"), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-I", "-c", script],
        cwd=home,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.split("@@report@@")[-1])


def test_remote_code_loads_where_the_package_is_not_installed(remote_user):
    assert remote_user["vanilla_modules"] == []
    for key, cls in (
        ("config", "VanillaTransformerConfig"),
        ("base", "VanillaTransformerModel"),
        ("model", "VanillaTransformerForConditionalGeneration"),
    ):
        assert remote_user[key].startswith("transformers_modules.") and remote_user[key].endswith("." + cls)
    assert remote_user["hidden_equal"]
    assert remote_user["logits_equal"], remote_user["logits_max_diff"]
    assert remote_user["generated_equal"]


def test_translation_pipeline_from_the_repo(remote_user, reference):
    assert "pipeline_error" not in remote_user, remote_user.get("pipeline_error")
    assert remote_user["pipeline"].endswith("pipeline_vanilla_transformer.TranslationPipeline")
    assert remote_user["pipeline_texts"] == reference["texts"]
    assert len(set(reference["texts"])) > 1  # different sentences, different translations


def test_custom_code_without_trust_remote_code_fails_at_once(remote_user):
    # Without a TTY transformers cannot ask, and must not wait for its 15 s prompt timeout.
    attempt = remote_user["no_trust"]
    assert attempt["error"] == "ValueError"
    assert "trust_remote_code=True" in attempt["message"]
    assert attempt["seconds"] < 10


def test_translate_command_from_the_hub_on_a_private_branch(run, hub, tmp_path):
    repo = f"{hub.user}/{unique('private')}"
    url = push_run(run["out"], repo, private=True, revision="dev")
    api = HfApi()
    assert api.model_info(repo).private
    with pytest.raises(RepositoryNotFoundError):
        api.model_info(repo, token=False)  # anonymous: a private repo looks missing
    assert set(api.list_repo_files(repo, revision="dev")) == EXPECTED_FILES | set(run["results"]["plots"])
    assert api.list_repo_files(repo) == [".gitattributes"]  # main is untouched
    assert url.endswith(api.list_repo_commits(repo, revision="dev")[0].commit_id)

    sources = read_multi30k(f"{TEST_SPLIT}.en.gz", 4)
    (tmp_path / "in.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    status = cli_main(
        [
            "translate",
            "--model",
            repo,
            "--revision",
            "dev",
            "--input",
            str(tmp_path / "in.en"),
            "--output",
            str(tmp_path / "out.de"),
            "--num_beams",
            "1",
            "--device",
            "cpu",
        ]
    )
    assert status == 0
    model = VanillaTransformerForConditionalGeneration.from_pretrained(run["out"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(run["out"])
    want = [
        tokenizer.decode(
            model.generate(**tokenizer(s, return_tensors="pt"), num_beams=1)[0], skip_special_tokens=True
        ).strip()
        for s in sources
    ]
    assert (tmp_path / "out.de").read_text(encoding="utf-8").splitlines() == want


def test_private_push_to_an_existing_public_repo_is_refused(run, hub):
    api = HfApi()
    repo = api.create_repo(f"{hub.user}/{unique('public')}").repo_id
    with pytest.raises(ValueError, match="already exists and is public"):
        push_run(run["out"], repo, private=True)
    assert [c.title for c in api.list_repo_commits(repo)] == ["initial commit"]


def test_push_command(run, hub, capsys):
    repo = f"test-org/{unique('cli')}"  # an organisation the user belongs to
    assert cli_main(["push", str(run["out"]), repo, "--dry_run"]) == 0
    listed = capsys.readouterr().out.split()
    assert set(listed) == EXPECTED_FILES - {".gitattributes"} | set(run["results"]["plots"])
    assert not HfApi().repo_exists(repo)  # a dry run does not touch the Hub
    assert cli_main(["push", str(run["out"]), repo, "--commit_message", "First release"]) == 0
    url = capsys.readouterr().out.strip()
    assert HfApi().list_repo_commits(repo)[0].title == "First release" and url.startswith(hub.endpoint)
    assert set(HfApi().list_repo_files(repo)) == EXPECTED_FILES | set(run["results"]["plots"])


def test_push_of_a_shipped_model_uploads_its_folder_as_it_is(hub, capsys):
    """`vanilla-transformer push multi30k-en-de REPO`: the repo holds the folder's files (the card rendered for that
    repo id, still naming the shipped model), and the package's folder is left exactly as it was."""
    from vanilla_transformer.translation.shipped import DEFAULT_MODEL, shipped_model_path

    folder = Path(shipped_model_path(DEFAULT_MODEL))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    repo = f"{hub.user}/{unique('shipped')}"
    assert cli_main(["push", DEFAULT_MODEL, repo]) == 0, capsys.readouterr().err
    assert set(HfApi().list_repo_files(repo)) == set(before) | {".gitattributes"}
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    card = Path(snapshot_download(repo, allow_patterns=["README.md", "model.safetensors"]))
    assert (card / "model.safetensors").read_bytes() == before["model.safetensors"]
    text = (card / "README.md").read_text()
    assert f'model="{repo}"' in text and f"--model {DEFAULT_MODEL}" in text


# ------------------------------------------------------------------------------------------------ errors


def test_no_token_fails_before_any_upload(run, hub, monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)  # and HF_HOME has no saved login
    repo = f"{hub.user}/{unique('no-token')}"
    with pytest.raises(ValueError, match="No Hugging Face token was found"):
        push_run(run["out"], repo)
    with pytest.raises(ValueError, match="No Hugging Face token was found"):
        ensure_repo(repo, token=False)
    assert not HfApi().repo_exists(repo, token=hub.token)


def test_wrong_token_fails_before_any_upload(run, hub, capsys):
    repo = f"{hub.user}/{unique('wrong-token')}"
    with pytest.raises(ValueError, match="token from the `token` argument is invalid or expired"):
        push_run(run["out"], repo, token="hf_not_a_valid_token")
    assert cli_main(["push", str(run["out"]), repo, "--token", "hf_not_a_valid_token"]) == 1
    assert "vanilla-transformer push: error: The Hugging Face token" in capsys.readouterr().err
    assert not HfApi().repo_exists(repo)


def test_foreign_namespace_fails_before_any_upload(run, hub):
    repo = f"other/{unique('foreign')}"  # "other" is another user of the loopback Hub
    with pytest.raises(ValueError, match="in the namespace 'other', where the token's user 'tester'"):
        push_run(run["out"], repo)
    assert not HfApi().repo_exists(repo)


def test_a_repo_in_an_organisation_of_the_user_or_with_a_bare_name_is_created(hub):
    in_org, bare = f"test-org/{unique('org')}", unique("bare")
    assert ensure_repo(in_org) == in_org and HfApi().repo_exists(in_org)  # an organisation of the user: fine
    assert ensure_repo(bare) == f"{hub.user}/{bare}"  # a bare name: the user's namespace


def test_train_py_checks_the_token_before_training(hub, data_dir, tmp_path):
    train = load_train_py()
    start = time.monotonic()
    with pytest.raises(ValueError, match="invalid or expired"):
        train.train(
            train_args(
                data_dir,
                tmp_path / "out",
                "--push_to_hub",
                "--hub_model_id",
                "tester/never",
                "--hub_token",
                "hf_not_a_valid_token",
            )
        )
    assert time.monotonic() - start < 10
    assert not (tmp_path / "out" / "tokenizer").exists() and not list((tmp_path / "out").glob("checkpoint-*"))


def test_offline_client_read_only_token_and_bad_repo_id(monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(ValueError, match="offline mode"):
        ensure_repo("tester/model")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(
        HfApi,
        "whoami",
        lambda self, token=None, **kw: {"name": "tester", "orgs": [], "auth": {"accessToken": {"role": "read"}}},
    )
    with pytest.raises(ValueError, match="is read-only"):
        ensure_repo("tester/model")
    with pytest.raises(ValueError, match=r"`repo_id`='a/b/c' is not a Hub model id"):
        ensure_repo("a/b/c")


def test_incomplete_directories_are_refused_before_any_network_call(run, tmp_path):
    assert set(files_to_push(run["out"])) == EXPECTED_FILES - {".gitattributes", "README.md"} | set(
        run["results"]["plots"]
    )
    cases = {
        "tokenizer.json": "has no tokenizer",
        "model.safetensors": "has no model.safetensors",
        "pipeline_vanilla_transformer.py": "names code in 'pipeline_vanilla_transformer.py'",
        "loss_vanilla_transformer.py": "names code in 'loss_vanilla_transformer.py'",
        "configuration_vanilla_transformer.py": "names code in 'configuration_vanilla_transformer.py'",
        "generation_vanilla_transformer.py": "names code in 'generation_vanilla_transformer.py'",
        "search_vanilla_transformer.py": "names code in 'search_vanilla_transformer.py'",
    }
    for missing, message in cases.items():
        copy = tmp_path / missing
        shutil.copytree(run["out"], copy, ignore=shutil.ignore_patterns("checkpoint-*", "runs"))
        (copy / missing).unlink()
        with pytest.raises(ValueError, match=re.escape(message)):
            files_to_push(copy)
    copy = tmp_path / "no_auto_map"
    shutil.copytree(run["out"], copy, ignore=shutil.ignore_patterns("checkpoint-*", "runs"))
    config = json.loads((copy / "config.json").read_text())
    del config["auto_map"]
    (copy / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="has no `auto_map`"):
        files_to_push(copy)
