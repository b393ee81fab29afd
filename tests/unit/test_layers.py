"""The layers of docs/design.md, checked from the imports the code really makes (lazy ones too).

The same reading as `../shared/tools/structure.py`, owned here so that CI runs it: every import of every
module under prep/, beam_jobs/ and loaders/, at any depth in the file. A test fails naming the module and
the import that breaks the rule, so the fix is in the message.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("prep", "beam_jobs", "loaders")
MAX_LINES = 400  # past this a module usually holds two roles (docs/design.md)

# What the pure core may import besides the standard library and itself (docs/design.md, "Layers").
# All but PIL, numpy and crc32c: lazily.
CORE_THIRD_PARTY = {
    "PIL",
    "numpy",
    "crc32c",
    "yaml",
    "pycocotools",
    "array_record",
    "pyarrow",
    "ijson",
    "braceexpand",
}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """Every module name `path` imports, absolute, with `from a import b` giving both `a` and `a.b`."""
    out: set[str] = set()
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _project(target: str) -> str | None:
    """The project module an import name lands in (`prep.core.naming.ShardName` -> `prep.core.naming`)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _is_core(module: str) -> bool:
    return module == "prep.core" or module.startswith("prep.core.")


def _is_run(module: str) -> bool:
    return module == "prep.core.run" or module.startswith("prep.core.run.")


def _is_prep_edge(module: str) -> bool:
    return module.startswith("prep.") and not _is_core(module)


def _top(name: str) -> str:
    return name.split(".")[0]


def _stdlib(name: str) -> bool:
    return _top(name) in sys.stdlib_module_names or _top(name) == "__future__"


def _breaks(module: str) -> list[str]:
    """The imports of `module` that its layer forbids, each with the rule it breaks."""
    found = []
    for name in sorted(IMPORTS[module]):
        target = _project(name)
        if _is_core(module):
            if target is not None and not _is_core(target) and target != "prep":
                found.append(f"{name}: the core imports nothing outside prep.core")
            elif target is not None and _is_run(target) and not _is_run(module):
                found.append(f"{name}: only prep.core.run and the edges import prep.core.run")
            elif target is None and not _stdlib(name) and _top(name) not in CORE_THIRD_PARTY:
                found.append(f"{name}: the core imports only the standard library, {sorted(CORE_THIRD_PARTY)}")
        elif _top(module) == "beam_jobs":
            if target is not None and (_is_prep_edge(target) or _top(target) == "loaders"):
                found.append(f"{name}: beam_jobs imports prep.core, not prep's edges or loaders")
            elif _top(name) == "tensorflow":
                found.append(f"{name}: beam_jobs does not import TensorFlow")
        elif _top(module) == "loaders":
            if target is not None and (_is_prep_edge(target) or _top(target) == "beam_jobs"):
                found.append(f"{name}: loaders imports prep.core, not prep's edges or beam_jobs")
            elif _top(name) == "apache_beam":
                found.append(f"{name}: loaders does not import Beam")
        elif target is not None and _top(target) == "loaders":
            found.append(f"{name}: prep's edges do not import loaders")
    return found


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_keeps_its_layer(module):
    assert _breaks(module) == [], f"{module} breaks the layers of docs/design.md"


def test_beam_jobs_are_imported_by_prep_convert_only():
    # Only the convert command reaches the pipeline; every other edge stays free of Beam's import time.
    importers = sorted(
        m
        for m in MODULES
        if _is_prep_edge(m) or m == "prep"
        if any((_project(i) or "").startswith("beam_jobs") for i in IMPORTS[m])
    )
    assert importers == ["prep.cli"]


def test_no_import_cycle():
    graph = {m: {t for t in map(_project, IMPORTS[m]) if t and t != m} for m in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_no_module_over_the_size_limit():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in MODULES.items()}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}


def test_the_checks_see_a_broken_layer(tmp_path):
    # The reading itself must be able to fail: a core module importing Beam lazily, inside a function.
    path = tmp_path / "bad.py"
    path.write_text(
        "def f():\n    from apache_beam import Map\n    import beam_jobs.graph\n    from prep.core.run import spill\n"
    )
    IMPORTS["prep.core.bad"] = _imports("prep.core.bad", path)
    try:
        assert len(_breaks("prep.core.bad")) == 5  # prep.core.run and prep.core.run.spill both named
    finally:
        del IMPORTS["prep.core.bad"]
