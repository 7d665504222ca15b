"""The package's layout as DESIGN.md states it: no import cycle between its modules, remote-code files that import
only torch, transformers and each other, and a training layer of functions one can read at once."""

import ast
import sys
from pathlib import Path


PACKAGE = Path(__file__).resolve().parents[1] / "vanilla_transformer"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """The package modules `path` imports, at module level or inside functions (both make a cycle at run time)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            target = f"{base}.{node.module}" if node.module else base
            candidates = [target] if node.module else [f"{base}.{alias.name}" for alias in node.names]
            found.update(candidates)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vanilla_transformer"):
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("vanilla_transformer"))
    return found


def test_no_module_of_the_package_imports_another_in_a_cycle():
    # pretrained/*/ holds the shipped models' copies of the remote-code files: data, never imported as modules.
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "pretrained" not in p.relative_to(PACKAGE).parts}
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    # The package's __init__ is imported by every submodule by Python itself; its own (lazy) imports are not a cycle.
    graph["vanilla_transformer"] = set()
    state, cycles = {}, []

    def visit(node, stack):
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert cycles == []


def test_remote_code_files_import_only_torch_transformers_and_each_other():
    """What `save_pretrained` copies into a checkpoint loads where only transformers is installed: the standard
    library, torch, transformers (and huggingface_hub, which transformers requires), and the sibling files."""
    allowed = set(sys.stdlib_module_names) | {"torch", "transformers", "huggingface_hub"}
    for path in PACKAGE.glob("*_vanilla_transformer.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert (node.module or "").endswith("_vanilla_transformer"), (path.name, node.module)
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                assert all(name.split(".")[0] in allowed for name in names), (path.name, names)


def test_training_functions_fit_in_a_read():
    """No function of the training layer (training/) is over 80 lines, unless its docstring says why."""
    paths = [*(PACKAGE / "training").glob("*.py")]
    long = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            too_long = isinstance(node, ast.FunctionDef) and node.end_lineno - node.lineno + 1 > 80
            if too_long and "long because" not in (ast.get_docstring(node) or ""):
                long.append(f"{path.name}:{node.name}")
    assert long == []
