#!/usr/bin/env python
"""`vanilla-transformer train` from a clone: `python train.py ...` or `accelerate launch train.py ...` run the same
entry point as the installed command (vanilla_transformer/training/train.py; `--help` lists the options), through
the console script's module, so that `--help` and the early checks answer before torch and transformers load."""

import sys

from vanilla_transformer_cli import main


if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
