#!/usr/bin/env python
"""`vanilla-transformer train` from a clone: `python train.py ...` or `accelerate launch train.py ...` run the same
entry point as the installed command (vanilla_transformer/training/command.py; `--help` lists the options)."""

import sys

from vanilla_transformer.training.command import main


if __name__ == "__main__":
    sys.exit(main())
