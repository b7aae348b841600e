"""The type stubs name exactly what the modules export."""

from __future__ import annotations

import ast
from pathlib import Path

import nam
import nam.farmem

PACKAGE = Path(nam.__file__).parent


def stub_names(path: Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def public(module) -> set[str]:
    return {n for n in dir(module) if not n.startswith("_") and (n[0].isupper() or callable(getattr(module, n)))}


def test_nam_stub_matches_module():
    names = stub_names(PACKAGE / "__init__.pyi") - {"Compare"}
    exported = public(nam) - {"farmem"}
    assert names - {"__version__"} == exported


def test_farmem_stub_matches_module():
    assert stub_names(PACKAGE / "farmem.pyi") == public(nam.farmem) - {"Client"}


def test_methods_of_classes_are_in_stubs():
    tree = ast.parse((PACKAGE / "__init__.pyi").read_text())
    stubbed = {
        node.name: {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
        for node in tree.body
        if isinstance(node, ast.ClassDef)
    }
    for cls in (nam.Client, nam.Allocation, nam.Request):
        methods = {m for m in dir(cls) if not m.startswith("_")}
        assert methods <= stubbed[cls.__name__], methods - stubbed[cls.__name__]
