"""The web demo (vanilla_transformer/demo/): its numbers are `attention_weights`' and its beam steps `generate`'s;
the page answers bad and hostile input and 20 visitors at once through its HTTP API (gradio_client against a server
on 127.0.0.1); a headless Chromium shows the same numbers and asks no other host for anything; the Space it writes
builds; the command line checks its options first. With a second model (`--compare`) the page shows each model's own
translation and numbers side by side, each read with its own tokenizer (another vocabulary and target language
too), and the command line refuses two models of different source languages.

One tiny model (tests/helpers.py's sizes, 120 Adam steps on real Multi30k pairs) serves every test of the module; the
compared one is a copy of it trained 30 more steps, with its own generation config (beam 2, length penalty 1).
"""

import copy
import json
import os
import re
import socket
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlparse

import pytest
import torch
from helpers import TINY_SIZES, read_multi30k, train_steps


os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
gr = pytest.importorskip("gradio")
gradio_client = pytest.importorskip("gradio_client")

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.commands import main  # noqa: E402
from vanilla_transformer.data.tokenizer import train_tokenizer  # noqa: E402
from vanilla_transformer.demo import page as demo_page  # noqa: E402
from vanilla_transformer.demo import space as demo_space  # noqa: E402
from vanilla_transformer.demo.computation import (  # noqa: E402
    TAIL,
    Decoding,
    prepare_source,
    run_translation,
    word_alignment,
)
from vanilla_transformer.demo.page import (  # noqa: E402
    DEMO_HINT,
    build_demo,
    compare_for_page,
    launch_demo,
    translate_for_page,
)
from vanilla_transformer.demo.views import SHOWN_TOKENS, alignment_html, attention_html  # noqa: E402
from vanilla_transformer.evaluation.attention import AttentionWeights, attention_weights  # noqa: E402


ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = Path(os.environ.get("VT_TEST_ARTIFACTS", ROOT / "tests" / "artifacts"))
SOURCE = "Two young men are riding bicycles down the street."
LIMIT = 96  # the tiny model's position table: a long paste is cut here
DEFAULT = ("model default", 4, 0.6, 1.0, 0, 1.0, 0, 0)  # the page's controls after the source, as the API takes them
CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.fixture(scope="module")
def model(tokenizer):
    torch.manual_seed(0)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer), max_position_embeddings=LIMIT, **TINY_SIZES)
    model = VanillaTransformerForConditionalGeneration(config)
    en, de = read_multi30k("train.en.gz", 2000), read_multi30k("train.de.gz", 2000)
    return train_steps(model, tokenizer, en, de, steps=120, seed=0)


@pytest.fixture(scope="module")
def model_fr():
    """A model of another vocabulary and target language: English -> French with its own tokenizer (600 tokens),
    40 steps. Returns (model, tokenizer)."""
    en, fr = read_multi30k("train.en.gz", 2000), read_multi30k("train.fr.gz", 2000)
    tokenizer_fr = train_tokenizer(en[:500] + fr[:500], vocab_size=600)
    torch.manual_seed(1)
    config = VanillaTransformerConfig(vocab_size=len(tokenizer_fr), max_position_embeddings=LIMIT, **TINY_SIZES)
    model = VanillaTransformerForConditionalGeneration(config)
    return train_steps(model, tokenizer_fr, en, fr, steps=40, seed=2), tokenizer_fr


@pytest.fixture(scope="module")
def model_b(model, tokenizer):
    """The model to compare with `model`: a later checkpoint of the same run (30 more steps), with its own
    generation config."""
    later = copy.deepcopy(model)
    en, de = read_multi30k("train.en.gz", 2000), read_multi30k("train.de.gz", 2000)
    later = train_steps(later, tokenizer, en, de, steps=30, seed=1)
    later.generation_config.num_beams = 2
    later.generation_config.length_penalty = 1.0
    return later


def serve(blocks):
    """Serve `blocks` on a free port of 127.0.0.1 in this process; yields its URL."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    _, url, _ = launch_demo(blocks, host="127.0.0.1", port=port, prevent_thread_lock=True, quiet=True)
    yield url
    blocks.close()


@pytest.fixture(scope="module")
def server(model, tokenizer):
    """The page served on a free port of 127.0.0.1 in this process; yields its URL."""
    yield from serve(build_demo(model, tokenizer, model_name="tiny <b>test</b> model"))


@pytest.fixture(scope="module")
def compare_server(model, model_b, tokenizer):
    """The page comparing `model` ("final") with `model_b`; yields its URL."""
    yield from serve(
        build_demo(model, tokenizer, model_name="final", compare=(model_b, tokenizer, "later <i>run</i>"))
    )


@pytest.fixture(scope="module")
def client(server):
    return gradio_client.Client(server, verbose=False)


def translate(client, text, *controls):
    """The page's translate endpoint: (translation, notice, cross, encoder, decoder, steps, alignment HTML)."""
    return client.predict(text, *(controls or DEFAULT), api_name="/translate")


def cells(page: str, kind: str) -> dict:
    """{(layer, head): [[weight, ...] per row]} of the `kind` heatmaps in `page`, read from their data-w."""
    found = {}
    for match in re.finditer(
        rf'<table class=vt-att data-kind="{kind}" data-layer="(\d+)" data-head="(\w+)">(.*?)</table>', page
    ):
        rows = re.findall(r"<tr><th class=row>.*?</tr>", match.group(3))
        found[int(match.group(1)), match.group(2)] = [
            [float(w) for w in re.findall(r'data-w="([\d.]+)"', row)] for row in rows
        ]
    return found


def expected_cells(weights: AttentionWeights, kind: str) -> dict:
    tensor = weights.of(kind)
    expected = {}
    for layer in range(tensor.shape[0]):
        for head in range(tensor.shape[1]):
            expected[layer, str(head)] = tensor[layer, head].tolist()
        expected[layer, "mean"] = tensor[layer].mean(dim=0).tolist()
    return expected


def assert_same_weights(shown: dict, expected: dict):
    assert shown.keys() == expected.keys()
    for key, rows in expected.items():
        assert torch.allclose(torch.tensor(shown[key]), torch.tensor(rows), atol=1e-4, rtol=0), key


# --- the numbers -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "decoding",
    [
        Decoding(),
        Decoding("greedy"),
        Decoding("beam search", num_beams=3, length_penalty=1.0),
        Decoding("sampling", temperature=0.8, top_k=20, seed=7),
    ],
    ids=lambda d: d.mode.replace(" ", "-"),
)
def test_translation_and_steps_are_generates(model, tokenizer, decoding):
    """The page's translation is `generate`'s with the same options; the step view's returned hypothesis is that
    translation, with `generate`'s own score; its heatmaps hold `attention_weights`' numbers."""
    result = run_translation(model, tokenizer, f"  {SOURCE}\n", decoding)
    kwargs = decoding.generate_kwargs()
    if kwargs.get("do_sample"):
        torch.manual_seed(decoding.seed)
    with torch.no_grad():
        out = model.generate(
            **tokenizer(SOURCE, return_tensors="pt"), **kwargs, output_scores=True, return_dict_in_generate=True
        )
    assert result.translation == tokenizer.decode(out.sequences[0], skip_special_tokens=True).strip()
    assert result.source == SOURCE and result.notice == ""
    finals = [(step, c) for step in result.steps for c in step.candidates if c.final]
    assert len(finals) == 1
    step, final = finals[0]
    assert final.tokens == result.weights.target_tokens[-TAIL:]
    assert final.length == len(result.weights.target_tokens) == step.index + 1
    if decoding.mode in ("model default", "beam search"):
        beams = kwargs.get("num_beams", model.generation_config.num_beams)
        assert final.status == "ended"
        assert final.score == pytest.approx(out.sequences_scores[0].item(), abs=1e-5)
        for step in result.steps[:-1]:
            assert len(step.candidates) == 2 * beams
            assert sum(c.status == "kept" for c in step.candidates) == beams
            scores = [c.log_prob for c in step.candidates]
            assert scores == sorted(scores, reverse=True)
    else:
        assert all(step.candidates[0].status == "chosen" for step in result.steps)
    if decoding.mode != "sampling":
        expected = attention_weights(model, tokenizer, SOURCE, **kwargs)
        assert expected.translation == result.translation
        for kind in ("cross", "encoder", "decoder"):
            assert_same_weights(cells(attention_html(result.weights, kind), kind), expected_cells(expected, kind))


def test_word_alignment_merges_subwords():
    # Target "Fahr ##rad </s>" over source "bi ##cycle man </s>": the word "Fahrrad" looks at "bicycle" (0.5 + 0.3
    # summed over its pieces) more than at "man" (0.6 on one piece, 0 on the other).
    cross = torch.tensor([[[0.5, 0.0, 0.5, 0.0], [0.3, 0.3, 0.0, 0.4], [0.0, 0.0, 0.0, 1.0]]])[None]
    weights = AttentionWeights(
        source="bicycle man",
        translation="Fahrrad",
        generated=False,
        source_tokens=["bi", "##cycle", "man", "</s>"],
        target_tokens=["Fahr", "##rad", "</s>"],
        decoder_input_tokens=["<s>", "Fahr", "##rad"],
        encoder=torch.zeros(1, 1, 4, 4),
        decoder=torch.zeros(1, 1, 3, 3),
        cross=cross,
    )
    source, target, links = word_alignment(weights)
    assert (source, target) == (["bicycle", "man"], ["Fahrrad"])
    assert links == [(0, 0, pytest.approx((0.5 + 0.6) / 2))]
    assert 'data-source="0" data-target="0"' in alignment_html(weights)


def test_long_input_is_cut_to_the_model_limit(model, tokenizer):
    limit = model.config.input_length_limit(tokenizer)
    assert limit == LIMIT
    text = " ".join(read_multi30k("train.en.gz", 500))
    source, notice = prepare_source(text, tokenizer, limit)
    assert len(tokenizer(source)["input_ids"]) <= limit
    assert text.startswith(source) and len(source) < len(text)
    assert f"at most {limit}" in notice
    assert prepare_source("  \n\t ", tokenizer, limit) == ("", "")


# --- the page through its HTTP API -----------------------------------------------------------------------------------


def test_api_translates_like_the_library(client, model, tokenizer):
    translation, notice, cross, encoder, decoder, steps, alignment = translate(client, SOURCE)
    expected = attention_weights(model, tokenizer, SOURCE)
    assert translation == expected.translation and notice == ""
    assert_same_weights(cells(cross, "cross"), expected_cells(expected, "cross"))
    assert_same_weights(cells(encoder, "encoder"), expected_cells(expected, "encoder"))
    assert 'data-final="1"' in steps and "<svg class=vt-align" in alignment
    greedy = translate(client, SOURCE, "greedy", *DEFAULT[1:])[0]
    assert greedy == attention_weights(model, tokenizer, SOURCE, num_beams=1).translation


@pytest.mark.parametrize("text", ["", "   \n\t  "], ids=["empty", "whitespace"])
def test_api_empty_input(client, text):
    translation, notice, *views = translate(client, text)
    assert translation == "" and "Type a sentence" in notice and views == [""] * 5


def test_api_long_paste_is_truncated_with_a_notice(client, tokenizer):
    words = " ".join(read_multi30k("train.en.gz", 600)).split()[:5000]
    assert len(words) == 5000
    translation, notice, cross, *_ = translate(client, " ".join(words))
    assert translation and f"at most {LIMIT}" in notice
    assert len(cells(cross, "cross")[0, "mean"][0]) == min(LIMIT, SHOWN_TOKENS)


def test_api_html_is_text_not_markup(client, model, tokenizer):
    hostile = '<script>alert("x")</script> <img src=x onerror=alert(1)> A man & a "dog".'
    outputs = translate(client, hostile)
    page = "".join(outputs[2:])
    assert "<script" not in page and "<img" not in page and "onerror=alert" not in page.replace("&", "")
    assert "&lt;" in outputs[2]  # the source's "<" pieces, shown as text
    assert outputs[0] == attention_weights(model, tokenizer, hostile).translation


@pytest.mark.parametrize("text", ["Мужчина едет на велосипеде.", "一个男人在骑自行车。", "رجل يركب دراجة"])
def test_api_non_latin_scripts(client, model, tokenizer, text):
    translation, notice, cross, *_ = translate(client, text)
    assert translation == attention_weights(model, tokenizer, text).translation and notice == ""
    assert cells(cross, "cross")


def test_api_bad_options_are_refused_and_the_server_goes_on(client, model, tokenizer):
    # Out of a slider's range: Gradio refuses it before the handler runs; the handler turns its own checks into the
    # notice (called directly: the page's sliders cannot send such a value).
    with pytest.raises(gradio_client.exceptions.AppError, match="less than minimum"):
        translate(client, SOURCE, "sampling", 4, 0.6, 0.0, 0, 1.0, 0, 0)
    translation, notice, *views = translate_for_page(model, tokenizer, SOURCE, "sampling", 4, 0.6, 0.0, 0, 1, 0, 0)
    assert translation == "" and "temperature must be above 0" in notice and views == [""] * 5 + [None]
    assert translate_for_page(model, tokenizer, SOURCE, "nonsense", 4, 0.6, 1, 0, 1, 0, 0)[1].startswith("\u26a0")
    assert translate(client, SOURCE)[0]


def test_api_twenty_visitors_at_once(client, server, model, tokenizer):
    sentences = read_multi30k("val.en.gz", 20)
    expected = [attention_weights(model, tokenizer, s).translation for s in sentences]
    started = time.monotonic()
    with ThreadPoolExecutor(20) as pool:
        answers = list(
            pool.map(
                lambda s: gradio_client.Client(server, verbose=False).predict(s, *DEFAULT, api_name="/translate")[0],
                sentences,
            )
        )
    assert answers == expected
    assert time.monotonic() - started < 90
    assert translate(client, SOURCE)[0]  # still serving


# --- two models side by side -----------------------------------------------------------------------------------------


def generated(model, tokenizer, text, **kwargs) -> str:
    """`model.generate`'s translation of `text` (its own generation config, overridden by `kwargs`)."""
    with torch.no_grad():
        out = model.generate(**tokenizer(text, return_tensors="pt"), **kwargs)
    return tokenizer.decode(out[0], skip_special_tokens=True).strip()


def assert_each_models_own(outputs, models, tokenizer, text, **kwargs):
    """`outputs` of the compare page (translations, notice, then each view for each model) hold each model's own
    translation (`generate`) and attention (`attention_weights`). `tokenizer`: one for all, or a list, one a model."""
    n = len(models)
    translations, notice, views = outputs[:n], outputs[n], outputs[n + 1 :]
    assert notice == ""
    tokenizers = tokenizer if isinstance(tokenizer, list) else [tokenizer] * n
    for i, (model, tokenizer) in enumerate(zip(models, tokenizers, strict=True)):
        expected = attention_weights(model, tokenizer, text, **kwargs)
        assert translations[i] == generated(model, tokenizer, text, **kwargs) == expected.translation
        cross, encoder, decoder, steps, alignment = views[i : 5 * n : n]
        assert_same_weights(cells(cross, "cross"), expected_cells(expected, "cross"))
        assert_same_weights(cells(encoder, "encoder"), expected_cells(expected, "encoder"))
        assert_same_weights(cells(decoder, "decoder"), expected_cells(expected, "decoder"))
        assert 'data-final="1"' in steps and "<svg class=vt-align" in alignment


def test_compare_translates_with_each_model(model, model_b, tokenizer):
    """The compare handler: each model's own translation (the model default: each its own generation config, beam 4
    and beam 2) and grids; the decoding controls apply to both; one model's outputs are `translate_for_page`'s."""
    sides = [(model, tokenizer, "final"), (model_b, tokenizer, "later")]
    assert model.generation_config.num_beams != model_b.generation_config.num_beams
    outputs = compare_for_page(sides, SOURCE, *DEFAULT, 0)
    assert len(outputs) == 2 + 1 + 2 * 5 + 2
    assert_each_models_own(outputs[:-2], [model, model_b], tokenizer, SOURCE)
    first, second = outputs[-2:]
    assert not torch.equal(first.cross, second.cross)  # two models, two sets of numbers
    greedy = compare_for_page(sides, SOURCE, "greedy", *DEFAULT[1:], 0)
    assert_each_models_own(greedy[:-2], [model, model_b], tokenizer, SOURCE, num_beams=1)
    one = compare_for_page(sides[:1], SOURCE, *DEFAULT)
    assert one[:-1] == translate_for_page(model, tokenizer, SOURCE, *DEFAULT)[:-1]


def test_api_compare_shows_both_models(compare_server, model, model_b, tokenizer):
    """Through the HTTP API: (translation A, translation B, notice, cross A, cross B, encoder A, ..., alignment B)."""
    client = gradio_client.Client(compare_server, verbose=False)
    outputs = client.predict(SOURCE, *DEFAULT, 0, api_name="/translate")
    assert len(outputs) == 2 + 1 + 2 * 5
    assert_each_models_own(outputs, [model, model_b], tokenizer, SOURCE)
    translation_a, translation_b, notice, *views = client.predict("  ", *DEFAULT, 0, api_name="/translate")
    assert (translation_a, translation_b, views) == ("", "", [""] * 10) and "Type a sentence" in notice


def test_compare_takes_another_vocabulary_and_target_language(model, tokenizer, model_fr):
    """English -> German beside English -> French: each model reads the sentence with its own tokenizer (600 tokens
    against 1,000) and shows its own translation and numbers."""
    model_c, tokenizer_c = model_fr
    assert len(tokenizer_c) != len(tokenizer)
    sides = [(model, tokenizer, "en-de"), (model_c, tokenizer_c, "en-fr")]
    outputs = compare_for_page(sides, SOURCE, *DEFAULT, 0)
    assert_each_models_own(outputs[:-2], [model, model_c], [tokenizer, tokenizer_c], SOURCE)
    assert build_demo(model, tokenizer, model_name="en-de", compare=(model_c, tokenizer_c, "en-fr")).title.endswith(
        "en-de vs en-fr"
    )


def test_compare_refuses_another_source_language_before_loading(
    model, tokenizer, model_fr, tmp_path, capsys, monkeypatch
):
    """Two folders whose results.json name different source languages: one line naming --compare, before any model
    loads; the same source language and another target language: the page starts with both."""
    from vanilla_transformer.translation import loading

    model_c, tokenizer_c = model_fr
    folders = {"en-de": (model, tokenizer), "en-fr": (model_c, tokenizer_c), "de-en": (model, tokenizer)}
    for name, (m, t) in folders.items():
        m.save_pretrained(tmp_path / name)
        t.save_pretrained(tmp_path / name)
        src, tgt = name.split("-")
        (tmp_path / name / "results.json").write_text(json.dumps({"src_lang": src, "tgt_lang": tgt}))
    capsys.readouterr()  # save_pretrained's progress bars
    launched, loaded = [], []
    real_load = loading.load_model
    monkeypatch.setattr(demo_page, "launch_demo", lambda blocks, **kw: launched.append(blocks))
    monkeypatch.setattr(loading, "load_model", lambda model, **kw: loaded.append(model) or real_load(model, **kw))
    a, b, c = (str(tmp_path / name) for name in folders)
    assert main(["demo", "--model", a, "--compare", c, "--device", "cpu"]) == 2
    lines = [line for line in capsys.readouterr().err.split("\n") if line]
    assert len(lines) == 1 and lines[0].startswith("vanilla-transformer demo: error: --compare")
    assert f"{c!r} translates from 'de' and --model {a!r} from 'en'" in lines[0]
    assert not loaded and not launched
    assert main(["demo", "--model", a, "--compare", b, "--device", "cpu"]) == 0
    assert loaded == [a, b] and [blocks.title for blocks in launched] == [f"vanilla-transformer: {a} vs {b}"]


def test_compare_two_shipped_models_by_name(monkeypatch, capsys):
    """`demo --model multi30k-en-de --compare multi30k-en-fr`: one English sentence, German and French side by side;
    German -> English beside English -> German is refused before either loads."""
    launched = []
    monkeypatch.setattr(demo_page, "launch_demo", lambda blocks, **kw: launched.append(blocks))
    assert main(["demo", "--model", "multi30k-en-de", "--compare", "multi30k-de-en", "--device", "cpu"]) == 2
    error = capsys.readouterr().err
    assert "--compare 'multi30k-de-en' translates from 'de' and --model 'multi30k-en-de' from 'en'" in error
    assert main(["demo", "--model", "multi30k-en-de", "--compare", "multi30k-en-fr", "--device", "cpu"]) == 0
    assert [blocks.title for blocks in launched] == ["vanilla-transformer: multi30k-en-de vs multi30k-en-fr"]


# --- in a browser ----------------------------------------------------------------------------------------------------

READ_CELLS = """
const out = {};
const root = arguments.length ? document.querySelector(arguments[0]) : document;  // arguments[0]: one model's column
for (const table of root ? root.querySelectorAll('table.vt-att[data-kind="cross"]') : []) {
  out[table.dataset.layer + '/' + table.dataset.head] = Array.from(table.querySelectorAll('tr')).slice(1).map(
    row => Array.from(row.querySelectorAll('td')).map(td => parseFloat(td.dataset.w)));
}
return out;
"""
READ_STEPS = """
return Array.from(document.querySelectorAll('details.vt-step')).map(step => Array.from(
  step.querySelectorAll('tr[data-status]')).map(row => [row.dataset.tokens, row.dataset.status, row.dataset.final]));
"""


def chromium(tmp_path):
    """A headless Chromium (selenium) that logs its requests."""
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--disable-dev-shm-usage",
        "--window-size=1400,1100",
        f"--user-data-dir={tmp_path / 'profile'}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    service = webdriver.ChromeService(executable_path=str(CHROMEDRIVER) if CHROMEDRIVER.exists() else None)
    return webdriver.Chrome(options=options, service=service)


def browser_cells(driver, root=None) -> dict:
    """READ_CELLS of the page (or of its element `root`), keyed as `expected_cells`."""
    found = driver.execute_script(READ_CELLS, *([root] if root else []))
    return {(int(k.split("/")[0]), k.split("/")[1]): v for k, v in found.items()}


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install chromium chromium-driver")
def test_browser_shows_the_library_numbers(server, model, tokenizer, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium(tmp_path)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(server)
        box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#vt-source textarea")))
        box.send_keys(SOURCE)
        driver.find_element(By.CSS_SELECTOR, "#vt-translate").click()
        output = driver.find_element(By.CSS_SELECTOR, "#vt-translation textarea")
        wait.until(lambda _: output.get_attribute("value"))
        expected = run_translation(model, tokenizer, SOURCE)
        assert output.get_attribute("value") == expected.translation

        wait.until(lambda d: d.execute_script(READ_CELLS))
        assert_same_weights(browser_cells(driver), expected_cells(expected.weights, "cross"))
        hover = driver.find_element(By.CSS_SELECTOR, 'table.vt-att[data-head="mean"] td').get_attribute("title")
        assert hover.startswith(
            f"target {expected.weights.target_tokens[0]} · source {expected.weights.source_tokens[0]}"
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "demo-cross.png"))

        driver.find_element(By.XPATH, "//button[@role='tab'][contains(., 'Decoding steps')]").click()
        wait.until(lambda d: d.execute_script(READ_STEPS))
        steps = driver.execute_script(READ_STEPS)
        assert steps == [
            [[" ".join(c.tokens), c.status, str(int(c.final))] for c in step.candidates] for step in expected.steps
        ]
        final = [row[0] for step in steps for row in step if row[2] == "1"]
        # A hypothesis is labelled by its last TAIL tokens (the tiny model's translation is longer than that).
        assert final == [" ".join(expected.weights.target_tokens[-TAIL:])]
        driver.save_screenshot(str(ARTIFACTS / "demo-steps.png"))

        hosts = set()
        for entry in driver.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message["method"] == "Network.requestWillBeSent":
                url = message["params"]["request"]["url"]
                if url.startswith(("http:", "https:", "ws:", "wss:")):
                    hosts.add(urlparse(url).hostname)
        assert hosts == {"127.0.0.1"}, f"the page asked other hosts: {hosts}"
    finally:
        driver.quit()


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium: apt-get install chromium chromium-driver")
def test_browser_compare_shows_two_columns(compare_server, model, model_b, tokenizer, tmp_path):
    """The compare page in a browser: each translation box and each cross-attention column (headed by its model's
    name, as text) holds its own model's numbers."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    driver = chromium(tmp_path)
    try:
        wait = WebDriverWait(driver, 60)
        driver.get(compare_server)
        box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#vt-source textarea")))
        box.send_keys(SOURCE)
        driver.find_element(By.CSS_SELECTOR, "#vt-translate").click()
        for suffix, side in (("a", model), ("b", model_b)):
            expected = run_translation(side, tokenizer, SOURCE)
            output = driver.find_element(By.CSS_SELECTOR, f"#vt-translation-{suffix} textarea")
            wait.until(lambda _, output=output: output.get_attribute("value"))
            assert output.get_attribute("value") == expected.translation
            column = f"#vt-cross-view-{suffix}"
            wait.until(lambda d, column=column: d.execute_script(READ_CELLS, column))
            assert_same_weights(browser_cells(driver, column), expected_cells(expected.weights, "cross"))
        headers = driver.find_elements(By.CSS_SELECTOR, '[data-testid="markdown"].vt-model-name')
        assert [e.text for e in headers if e.is_displayed()] == ["final", "later <i>run</i>"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "demo-compare.png"))
    finally:
        driver.quit()


# --- the Space and the command line ---------------------------------------------------------------------------------


def test_written_space_builds_the_page(model, tokenizer, tmp_path, hub):
    from huggingface_hub import HfApi

    api = HfApi()
    repo_id = f"tester/demo-model-{os.getpid()}"
    api.create_repo(repo_id, exist_ok=True)
    model_dir = tmp_path / "model"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    api.upload_folder(folder_path=model_dir, repo_id=repo_id)
    space = tmp_path / "space"
    requirement = "vanilla-transformer[demo] @ git+https://example.org/vanilla-transformer"
    assert main(["demo", "--model", repo_id, "--write_space", str(space), "--requirement", requirement]) == 0
    assert sorted(p.name for p in space.iterdir()) == ["README.md", "app.py", "requirements.txt"]
    assert (space / "requirements.txt").read_text().splitlines()[0] == requirement
    namespace = {"__name__": "space_app"}
    exec(
        compile((space / "app.py").read_text(), str(space / "app.py"), "exec"), namespace
    )  # imports, builds, no launch
    assert isinstance(namespace["demo"], gr.Blocks)
    api.create_repo(f"tester/demo-space-{os.getpid()}", repo_type="space", space_sdk="gradio", exist_ok=True)
    api.upload_folder(folder_path=space, repo_id=f"tester/demo-space-{os.getpid()}", repo_type="space")
    files = api.list_repo_files(f"tester/demo-space-{os.getpid()}", repo_type="space")
    assert {"app.py", "requirements.txt", "README.md"} <= set(files)


def test_the_space_installs_the_package_from_its_repository(capsys, tmp_path, monkeypatch):
    """The package is not on PyPI: the Space's requirement is a git URL of the repository that the package's metadata
    records (pyproject.toml's [project.urls] Repository), or --requirement; with neither, a one-line error and
    nothing written."""
    monkeypatch.setattr(demo_space, "repository_url", lambda: None)
    assert main(["demo", "--model", "a/b", "--write_space", str(tmp_path / "none")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "--write_space needs --requirement" in error
    assert not (tmp_path / "none").exists()
    monkeypatch.setattr(demo_space, "repository_url", lambda: "https://github.com/someone/vanilla-transformer")
    assert main(["demo", "--model", "a/b", "--write_space", str(tmp_path / "url")]) == 0
    requirements = (tmp_path / "url" / "requirements.txt").read_text().splitlines()
    assert requirements[0] == "vanilla-transformer[demo] @ git+https://github.com/someone/vanilla-transformer"
    assert requirements[1] == f"gradio=={gr.__version__}"
    own = "vanilla-transformer[demo] @ git+https://example.org/fork@v0.1.0"
    assert main(["demo", "--model", "a/b", "--write_space", str(tmp_path / "own"), "--requirement", own]) == 0
    assert (tmp_path / "own" / "requirements.txt").read_text().splitlines()[0] == own


def test_cli_checks_options_before_loading(capsys, tmp_path, monkeypatch, hub):
    # Two repos of the loopback Hub: online, the checks find them and go on (a name that no folder and no repo holds
    # is refused first: tests/test_hub_lookup.py).
    from huggingface_hub import HfApi

    a, c = f"{hub.user}/demo-a", f"{hub.user}/demo-c"
    for repo in (a, c):
        HfApi().create_repo(repo, exist_ok=True)
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", False)
    assert main(["demo", "--model", str(tmp_path / "missing"), "--port", "70000"]) == 2
    assert "--port must be between 0 and 65535" in capsys.readouterr().err
    assert main(["demo", "--model", str(tmp_path / "missing")]) == 2
    assert "no such directory" in capsys.readouterr().err
    assert main(["demo", "--model", a, "--compare", str(tmp_path / "missing")]) == 2
    assert "--compare" in capsys.readouterr().err
    assert main(["demo", "--model", a, "--compare", c, "--write_space", str(tmp_path / "space")]) == 2
    assert "--compare is for the page served here" in capsys.readouterr().err
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    assert main(["demo", "--model", a, "--write_space", str(tmp_path / "full")]) == 2
    assert "not an empty directory" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "gradio", None)  # as if gradio were not installed
    model_dir = tmp_path / "m"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "tokenizer.json").write_text("{}")
    assert main(["demo", "--model", str(model_dir)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and DEMO_HINT in error  # the cli says it in the demo's words
