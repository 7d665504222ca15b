"""The `vanilla-transformer` console script (pyproject.toml's [project.scripts]): `vanilla_transformer.commands.main`
imported so that parsing the command line waits for neither torch nor transformers.

`import vanilla_transformer` registers the model with transformers' Auto classes, which imports torch and
transformers (seconds; docs/performance.md gives the --help times). The command line needs neither to parse its
options, print `--help` or refuse a bad option. This module, outside the package (any module inside it imports the
package first), imports the package with the registration deferred, by the package's REGISTER_LATER variable, set
only during that import; `main` registers once the options are parsed, before a command runs.

    vanilla-transformer COMMAND ...                 # the console script
    python -m vanilla_transformer_cli COMMAND ...   # the same, where the script is not on PATH
"""

import os
import sys


os.environ["VANILLA_TRANSFORMER_REGISTER_LATER"] = "1"  # vanilla_transformer.REGISTER_LATER
try:
    from vanilla_transformer.commands import main
finally:
    del os.environ["VANILLA_TRANSFORMER_REGISTER_LATER"]

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(main())
