"""Imports point one way around the operations package and the CLI: the CLI imports ops, ops imports the
services, and never back; the CLI's command modules never import the package that assembles them."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"voltbus.services": ROOT / "services", "voltbus.cli": ROOT / "voltbus" / "cli"}
OPS = "voltbus.services.ops"
OPS_MAY_IMPORT = ("voltbus.schemas", "voltbus.services", "voltbus.projections")


def _modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` (its ``__init__`` as the package itself) with its file."""
    base = PACKAGES[package]
    found = {}
    for path in sorted(base.rglob("*.py")):
        parts = path.relative_to(base).with_suffix("").parts
        name = ".".join((package, *parts))
        found[name.removesuffix(".__init__")] = path
    return found


def imports(module: str, path: Path) -> set[str]:
    """The first-party modules ``module`` imports anywhere in its file (inside functions too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            source = ".".join(p for p in (base, node.module or "") if p)
            found |= {source} | {f"{source}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("voltbus")} - {module}


def _graph() -> dict[str, set[str]]:
    modules = {**_modules("voltbus.services"), **_modules("voltbus.cli")}
    return {name: imports(name, path) & set(modules) for name, path in modules.items()}


def test_the_relative_import_resolution_sees_each_form() -> None:
    path = PACKAGES["voltbus.services"] / "ops" / "up.py"
    found = imports("voltbus.services.ops.up", path)
    assert {"voltbus.services.ops.compose", "voltbus.services.settings", "voltbus.schemas.errors"} <= found


def test_no_service_and_no_plumbing_imports_the_operations_package() -> None:
    modules = _modules("voltbus.services")
    back = {
        name: sorted(i for i in imports(name, path) if i == OPS or i.startswith(OPS + "."))
        for name, path in modules.items()
        if not (name == OPS or name.startswith(OPS + "."))
    }
    assert {name: found for name, found in back.items() if found} == {}


def test_operations_import_only_schemas_services_and_projections() -> None:
    modules = {n: p for n, p in _modules("voltbus.services").items() if n == OPS or n.startswith(OPS + ".")}
    assert "voltbus.services.ops.natsserver" in modules
    upward = {
        name: sorted(i for i in imports(name, path) if not i.startswith(OPS_MAY_IMPORT))
        for name, path in modules.items()
    }
    assert {name: found for name, found in upward.items() if found} == {}


def test_command_modules_do_not_import_the_cli_package() -> None:
    modules = _modules("voltbus.cli")
    assert "voltbus.cli.common" in modules and "voltbus.cli.bus" in modules
    back = {name: "voltbus.cli" in imports(name, path) for name, path in modules.items() if name != "voltbus.cli"}
    assert [name for name, found in back.items() if found] == []


def test_no_import_cycle_among_services_ops_and_the_cli() -> None:
    graph = _graph()
    cycles = []
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            if name == start:
                cycles.append(start)
                break
            if name not in seen:
                seen.add(name)
                todo += graph[name]
    ours = [name for name in cycles if name.startswith((OPS, "voltbus.cli", "voltbus.services.sockets"))]
    assert ours == []
