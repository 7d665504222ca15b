"""Translation with a trained model: loading it by name or path (`loading.py`, `shipped.py`), batched `generate`
(`translate.py`), and the CTranslate2 engine (`ctranslate2.py`); `commands.py`: `vanilla-transformer translate` and
`export`."""
