"""The layering the project is built on, checked: packages import one way, no module cycles,
no private names imported across modules, no module over the line budget (the schedule fuzzer in
``tests/fuzz`` is held to the last two as well)."""
from __future__ import annotations

import ast
import pathlib
import re

import grimp
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("tensorir", "schedules", "cost_model", "logs", "tuner", "graph")
LINE_BUDGET = 600
FUZZER = "tests/fuzz"


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path


def test_import_linter_contracts_hold():
    # The contracts live in pyproject.toml ([tool.importlinter]); `lint-imports` prints the details.
    from importlinter.cli import lint_imports
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_no_module_import_cycles():
    graph = grimp.build_graph(*PACKAGES, exclude_type_checking_imports=True, cache_dir=None)
    index, low, on_stack, stack, cycles = {}, {}, set(), [], []

    def strongconnect(v):         # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(graph.modules):
        if m not in index:
            strongconnect(m)
    # A package importing its own submodules (``__init__`` re-exports) is not a cycle of concepts.
    cycles = [c for c in cycles if not all(a.startswith(c[0] + ".") or a == c[0] for a in c)]
    assert not cycles, f"import cycles: {cycles}"


def _private_imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and (node.module.split(".")[0] in PACKAGES or node.module.startswith("tests.fuzz")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    yield f"{path.relative_to(ROOT)}:{node.lineno} imports {node.module}.{alias.name}"


def test_no_private_names_imported_across_modules():
    found = [hit for path in _modules() for hit in _private_imports(path)]
    found += [hit for path in sorted((ROOT / "benchmarks").glob("*.py")) for hit in _private_imports(path)]
    found += [hit for path in sorted((ROOT / FUZZER).rglob("*.py")) for hit in _private_imports(path)]
    assert not found, "\n".join(found)


@pytest.mark.parametrize("folder", PACKAGES + ("benchmarks", FUZZER))
def test_modules_stay_within_the_line_budget(folder):
    over = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > LINE_BUDGET}
    assert not over, f"modules over {LINE_BUDGET} lines (split them by concept): {over}"


def test_every_decision_note_is_indexed_and_every_cited_note_exists():
    # a default's code comment cites its note by path: a renamed note would leave the reason unreachable
    notes = ROOT / "docs" / "decisions"
    index = (notes / "README.md").read_text()
    unindexed = [p.name for p in sorted(notes.glob("[0-9][0-9][0-9]-*.md")) if f"({p.name})" not in index]
    assert not unindexed, f"decision notes missing from docs/decisions/README.md: {unindexed}"
    cited = {m for folder in PACKAGES + ("benchmarks", "tests") for p in (ROOT / folder).rglob("*.py")
             for m in re.findall(r"docs/decisions/(\d{3}-[\w.-]+?\.md)", p.read_text())}
    assert cited and not sorted(c for c in cited if not (notes / c).exists())
