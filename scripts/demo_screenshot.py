"""docs/demo.png: the demo page of the shipped model, as a headless Chromium shows it after one translation.

    python scripts/demo_screenshot.py [--model multi30k-en-de] [--output docs/demo.png]

Starts `vanilla-transformer demo --model MODEL` on 127.0.0.1, types the sentence into the page, presses Translate,
waits for the translation and the cross-attention grids, and saves the screenshot. Needs the demo extra and Debian's
chromium and chromium-driver (as tests/test_demo.py's browser tests).
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait


ROOT = Path(__file__).resolve().parents[1]
SENTENCE = "A boy wearing headphones sits on a woman's shoulders."  # the third validation sentence, as docs/attention


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="multi30k-en-de")
    parser.add_argument("--output", type=Path, default=ROOT / "docs" / "demo.png")
    parser.add_argument("--sentence", default=SENTENCE)
    args = parser.parse_args(argv)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "vanilla_transformer.commands", "demo", "--model", args.model, "--port", str(port)],
        env={**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1"},
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        for _ in range(240):  # the model loads in seconds; gradio starts in ~10 s
            try:
                urllib.request.urlopen(url, timeout=2)
                break
            except OSError:
                time.sleep(0.5)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        with tempfile.TemporaryDirectory() as profile:
            for flag in (
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1400,1100",
                "--disable-dev-shm-usage",
                f"--user-data-dir={profile}",
            ):
                options.add_argument(flag)
            driver = webdriver.Chrome(options=options, service=webdriver.ChromeService("/usr/bin/chromedriver"))
            try:
                wait = WebDriverWait(driver, 120)
                driver.get(url)
                box = wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "#vt-source textarea")))
                box.send_keys(args.sentence)
                driver.find_element(By.CSS_SELECTOR, "#vt-translate").click()
                output = driver.find_element(By.CSS_SELECTOR, "#vt-translation textarea")
                wait.until(lambda _: output.get_attribute("value"))
                wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, 'table.vt-att[data-kind="cross"]'))
                time.sleep(1)  # the grids' last paint
                driver.save_screenshot(str(args.output))
                print(f"translation: {output.get_attribute('value')}\nscreenshot: {args.output}")
            finally:
                driver.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
