"""The package's layout as docs/architecture.md states it: no import cycle between its modules, remote-code files that
import only the standard library, torch, transformers (huggingface_hub) and each other, the floors, and functions one
can read at once."""

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


# The functions allowed over 80 lines, each with its reason (module path inside the package, function name).
LONG_FUNCTIONS: dict[tuple[str, str], str] = {
    ("search_vanilla_transformer.py", "gnmt_beam_search"): (
        "transformers' beam search loop, step for step, so that it can be read beside it (lettered steps a-g as "
        "there); split, its dozen running tensors would travel through every call"
    ),
}


def test_functions_fit_in_a_read():
    """No function of the package is over 80 lines, but those of LONG_FUNCTIONS (tests/, bench/ and scripts/ are
    not the package); an allowance no longer needed is removed, so the list says what is still long."""
    long = set()
    for path in PACKAGE.rglob("*.py"):
        if "pretrained" in path.relative_to(PACKAGE).parts:  # the shipped models' copies of the remote code
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno - node.lineno + 1 > 80:
                long.add((path.relative_to(PACKAGE).as_posix(), node.name))
    assert sorted(long - LONG_FUNCTIONS.keys()) == [], "over 80 lines: split them, or say why in LONG_FUNCTIONS"
    assert sorted(LONG_FUNCTIONS.keys() - long) == [], "no longer over 80 lines: remove them from LONG_FUNCTIONS"


# docs/architecture.md's floors, lowest first: a module imports only from its own floor or those below it.
FLOORS = {
    "remote code": [
        "vanilla_transformer.configuration_vanilla_transformer",
        "vanilla_transformer.modeling_vanilla_transformer",
        "vanilla_transformer.loss_vanilla_transformer",
        "vanilla_transformer.pipeline_vanilla_transformer",
        "vanilla_transformer.generation_vanilla_transformer",
        "vanilla_transformer.search_vanilla_transformer",
    ],
    "library": [
        "vanilla_transformer.data",
        "vanilla_transformer.translation.loading",
        "vanilla_transformer.translation.shipped",
        "vanilla_transformer.translation.translate",
        "vanilla_transformer.evaluation.bleu",
        "vanilla_transformer.evaluation.attention",
        "vanilla_transformer.evaluation.metrics_sacrebleu",
        "vanilla_transformer.checkpoints",
        "vanilla_transformer.hub_lookup",
        "vanilla_transformer.precision",
        "vanilla_transformer.registration",
    ],
    "tools": [
        "vanilla_transformer.training",
        "vanilla_transformer.hub",
        "vanilla_transformer.demo",
        "vanilla_transformer.translation.ctranslate2",
    ],
    "commands": [
        "vanilla_transformer.commands",
        "vanilla_transformer.arguments",
        "vanilla_transformer.translation.commands",
        "vanilla_transformer.evaluation.commands",
        "vanilla_transformer.hub.commands",
        "vanilla_transformer.training.train",
        "vanilla_transformer.training.commands",
        "vanilla_transformer.demo.commands",
        "vanilla_transformer.demo.page",
    ],
}


def _floor(module: str) -> int | None:
    """The floor of `module` (0 = remote code): its longest prefix in FLOORS; None for the package's __init__ files."""
    best = None
    for level, prefixes in enumerate(FLOORS.values()):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (level, len(prefix))
    return best[0] if best else None


def test_each_module_imports_only_its_own_floor_or_those_below():
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py") if "pretrained" not in p.relative_to(PACKAGE).parts}
    unplaced = [m for m, p in modules.items() if _floor(m) is None and p.name != "__init__.py"]
    assert unplaced == [], "modules docs/architecture.md's floors do not place"
    upward = []
    for name, path in modules.items():
        if path.name == "__init__.py":
            continue
        for target in _imports(path):
            if target in modules and _floor(target) is not None and _floor(target) > _floor(name):
                upward.append(f"{name} -> {target}")
    assert upward == []


# ---- the tests run from a clone alone (issue 58): nothing they read lies outside the repository ----------------------

ROOT = PACKAGE.parent


def _levels_up(node: ast.AST, names: dict[str, int]) -> int | None:
    """How many directories above its own file the path expression `node` is (`Path(__file__)` is 0, its `.parent` 1,
    its `.parents[1]` 2; a module-level name bound to one counts as it); None for what is not such a path."""
    if isinstance(node, ast.Call) and not node.args and isinstance(node.func, ast.Attribute):
        return _levels_up(node.func.value, names) if node.func.attr in ("resolve", "absolute") else None
    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Path") and len(node.args) == 1:
        return 0 if ast.unparse(node.args[0]) == "__file__" else None
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.Attribute) and node.attr == "parent":
        below = _levels_up(node.value, names)
        return None if below is None else below + 1
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
        below, index = _levels_up(node.value.value, names), node.slice
        if below is not None and isinstance(index, ast.Constant) and isinstance(index.value, int):
            return below + index.value + 1
    return None


def _paths_outside_the_repository(relative: Path, source: str) -> list[str]:
    """The expressions of the test file at `relative` (to the repository root) that name a path above the root: a
    climb from `__file__` past it, or the data beside the repository that the tests once read."""
    allowed = len(relative.parts)  # tests/x.py: Path(__file__).parents[1], two levels up, is the root
    tree, names, found = ast.parse(source), {}, []
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(target, ast.Name) and (levels := _levels_up(node.value, names)) is not None:
            names[target.id] = levels
    for node in ast.walk(tree):
        if isinstance(node, ast.expr) and (_levels_up(node, names) or 0) > allowed:
            found.append(ast.unparse(node))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "../shared" in node.value:
            found.append(node.value)
    return found


def test_the_check_for_paths_outside_the_repository_finds_them():
    here = Path("tests") / "test_x.py"
    for outside in (
        'M = Path(__file__).resolve().parents[2] / "shared" / "data"',
        "M = Path(__file__).parent.parent.parent",
        "ROOT = Path(__file__).resolve().parents[1]\nM = ROOT.parent",
        'M = "../shared/data/multi30k"',
    ):
        assert _paths_outside_the_repository(here, outside), outside
    inside = 'ROOT = Path(__file__).resolve().parents[1]\nM = ROOT / "tests"\nN = Path(__file__).parent.parent'
    assert _paths_outside_the_repository(here, inside) == []
    assert _paths_outside_the_repository(Path("tests") / "support" / "x.py", "M = Path(__file__).parents[2]") == []


def test_no_test_reads_outside_the_repository():
    """A clone alone runs the tests: none names ../shared or climbs from its own file above the repository root (the
    data they read is tests/data/; .ci/run also runs them in a copy with nothing beside it)."""
    found = {}
    for path in sorted((ROOT / "tests").rglob("*.py")):
        if path == Path(__file__).resolve():  # this file names what it looks for
            continue
        if outside := _paths_outside_the_repository(path.relative_to(ROOT), path.read_text()):
            found[path.relative_to(ROOT).as_posix()] = outside
    assert found == {}
