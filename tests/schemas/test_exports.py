"""``voltbus.schemas`` re-exports every public name of its modules, with a sorted ``__all__``."""

from __future__ import annotations

import ast
import pathlib

import voltbus.schemas as schemas

SCHEMAS_DIR = pathlib.Path(schemas.__file__).parent


def public_names(path: pathlib.Path) -> set[str]:
    """Top-level classes, functions and assigned aliases/constants of a module, minus private ones."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        match node:
            case ast.ClassDef(name=name) | ast.FunctionDef(name=name):
                names.add(name)
            case ast.Assign(targets=targets):
                names.update(t.id for t in targets if isinstance(t, ast.Name))
            case ast.AnnAssign(target=ast.Name(id=name)):
                names.add(name)
    return {n for n in names if not n.startswith("_")}


def test_all_is_sorted() -> None:
    assert schemas.__all__ == sorted(schemas.__all__)


def test_all_is_complete() -> None:
    defined = set().union(*(public_names(p) for p in SCHEMAS_DIR.glob("*.py") if p.name != "__init__.py"))
    assert sorted(defined - set(schemas.__all__)) == []
    assert sorted(set(schemas.__all__) - defined) == []


def test_all_names_resolve() -> None:
    assert [n for n in schemas.__all__ if not hasattr(schemas, n)] == []
