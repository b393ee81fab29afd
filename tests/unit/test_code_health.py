"""What keeps the code easy to change, read from the product code's syntax trees (docs/development.md).

- a step takes its options as one typed object: no function over MAX_PARAMETERS parameters;
- Beam steps with several kinds of output name them (TaggedOutput, NamedTuples): no string in a tuple's
  first place compared in a router such as `v[0] == "unit"` or `v[1][0] == "unit"`;
- work files a resume reads back cannot run code: no pickle;
- prep/core/workdir.py owns every path under `.prep-tmp`: nobody else joins onto `WorkDir.root` or spells
  the folder's name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = sorted(p for package in ("prep", "beam_jobs", "loaders") for p in (ROOT / package).rglob("*.py"))
MAX_PARAMETERS = 8
WORKDIR = ROOT / "prep" / "core" / "workdir.py"


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _where(path: Path, node: ast.AST) -> str:
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
    return f"{shown}:{getattr(node, 'lineno', 0)}"


def wide_signatures(path: Path) -> list[str]:
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            names = [a.arg for a in args.posonlyargs + args.args + args.kwonlyargs]
            count = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
            if count > MAX_PARAMETERS:
                found.append(f"{_where(path, node)} {node.name} takes {count} parameters")
    return found


def _first_place(node: ast.expr) -> bool:
    return isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == 0


def string_tag_routing(path: Path) -> list[str]:
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], (ast.Eq, ast.In)):
            right = node.comparators[0]
            tags = [right] if isinstance(node.ops[0], ast.Eq) else getattr(right, "elts", [])
            if (
                _first_place(node.left)
                and tags
                and all(isinstance(t, ast.Constant) and isinstance(t.value, str) for t in tags)
            ):
                found.append(f"{_where(path, node)} routes by a string in position 0")
    return found


def pickle_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(_tree(path)):
        names = (
            [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else []
        )
        if any(n.split(".")[0] in ("pickle", "cPickle", "dill", "cloudpickle") for n in names):
            found.append(f"{_where(path, node)} imports {', '.join(names)}")
    return found


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def work_paths_outside_workdir(path: Path) -> list[str]:
    if path == WORKDIR:
        return []
    tree = _tree(path)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if name == "join" and any(isinstance(a, ast.Attribute) and a.attr == "root" for a in node.args):
                found.append(f"{_where(path, node)} builds a path under the work directory's root")
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and ".prep-tmp" in node.value
            and id(node) not in docs
        ):
            found.append(f"{_where(path, node)} spells the work directory's name")
    return found


CHECKS = [wide_signatures, string_tag_routing, pickle_imports, work_paths_outside_workdir]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_product_code_is_clean(check):
    assert [f for path in PRODUCT for f in check(path)] == []


BAD = '''
import pickle

def wide(a, b, c, d, e, f, g, h, i):
    return storage.join(work.root, "groups", "x.json")

routed = beam.FlatMap(lambda v: [v] if v[1][0] == "unit" else [])
kind = answer[0] in ("ok", "rejected")
folder = ".prep-tmp"
'''


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_each_check_finds_what_it_looks_for(check, tmp_path):
    path = tmp_path / "bad.py"
    path.write_text(BAD)
    expected = {"wide_signatures": 1, "string_tag_routing": 2, "pickle_imports": 1, "work_paths_outside_workdir": 2}
    assert len(check(path)) == expected[check.__name__]
