"""Measures the code's structure (import graph between units, cycles, module and function sizes) and
checks the import contracts of pyproject.toml's [tool.importlinter] with import-linter.

    .venv/bin/python .ci/structure.py            # the report (before/after figures of a redesign)
    .venv/bin/python .ci/structure.py contracts  # lint-imports over the whole import root; exit 1 if broken

The import root ``voltbus`` is assembled from several folders (pyproject's setuptools ``package-dir``:
``schemas/`` is ``voltbus.schemas`` …), which grimp and import-linter cannot follow in an editable
install: both walk the folder of the top-level package only. So the sources are first copied into a
temporary folder laid out as installed, and the graph is built there. Every import counts, those
inside functions and under ``TYPE_CHECKING`` too.
"""

from __future__ import annotations

import ast
import shutil
import statistics
import subprocess
import sys
import tempfile
import tomllib
from collections import Counter, defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "voltbus"
# Packages counted as one unit each, subpackages included (the rest split per subpackage, plus one
# unit for their loose modules).
WHOLE_UNITS = ("voltbus.schemas", "voltbus.projections")


def package_dirs() -> dict[str, Path]:
    """Each mapped package of the import root and its folder, from pyproject.toml's ``package-dir``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = config["tool"]["setuptools"]["package-dir"]
    return {name: ROOT / folder for name, folder in mapping.items() if name.split(".")[0] == ROOT_PACKAGE}


def source_files() -> Iterator[tuple[str, Path]]:
    """(module name, path) of every Python module in the import root."""
    for package, folder in package_dirs().items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            yield ".".join([package, *parts]), path


@contextmanager
def installed_layout() -> Iterator[Path]:
    """A temporary folder holding the import root's modules as an installed package lays them out."""
    with tempfile.TemporaryDirectory(prefix="voltbus-structure-") as tmp:
        for name, path in source_files():
            parts = name.split(".")
            target = (
                Path(tmp, *parts, "__init__.py")
                if path.name == "__init__.py"
                else Path(tmp, *parts[:-1], parts[-1] + ".py")
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        yield Path(tmp)


def import_graph():  # -> grimp.ImportGraph
    """grimp's graph of every import within the import root."""
    import grimp

    with installed_layout() as tmp:
        sys.path.insert(0, str(tmp))
        try:
            for name in [m for m in sys.modules if m == ROOT_PACKAGE or m.startswith(ROOT_PACKAGE + ".")]:
                del sys.modules[name]  # grimp locates the package through the import system
            return grimp.build_graph(ROOT_PACKAGE, cache_dir=None)
        finally:
            sys.path.remove(str(tmp))


def unit(module: str) -> str:
    """The unit a module belongs to: a whole package of WHOLE_UNITS, a subpackage, or a package's loose modules."""
    for whole in WHOLE_UNITS:
        if module == whole or module.startswith(whole + "."):
            return whole.removeprefix(ROOT_PACKAGE + ".")
    parts = module.split(".")
    depth = 2 if parts[1:2] == ["services"] else 1
    label = parts[depth - 1]  # "services" or "voltbus"
    if len(parts) > depth + 1 or (len(parts) == depth + 1 and is_package(module)):
        return f"{label}.{parts[depth]}"
    return f"{label} (loose)"


_PACKAGES: set[str] = set()


def is_package(module: str) -> bool:
    """Whether ``module`` is a package (an ``__init__.py``)."""
    if not _PACKAGES:
        _PACKAGES.update(name for name, path in source_files() if path.name == "__init__.py")
    return module in _PACKAGES


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one member, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(edges.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return sorted(found, key=len, reverse=True)


def function_sizes() -> list[tuple[int, str]]:
    """(lines, 'module:function') of every function and method, decorators excluded."""
    sizes = []
    for name, path in source_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                sizes.append((node.end_lineno - node.lineno + 1, f"{name}:{node.name}"))  # type: ignore[operator]
    return sorted(sizes, reverse=True)


def report() -> None:
    """Prints the structure report."""
    graph = import_graph()
    module_edges: dict[str, set[str]] = defaultdict(set)
    unit_imports: Counter[tuple[str, str]] = Counter()
    for importer in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(importer):
            module_edges[importer].add(imported)
            if unit(importer) != unit(imported):
                unit_imports[unit(importer), unit(imported)] += 1
    units = sorted({unit(m) for m in graph.modules})
    print(f"## Units ({len(units)}) and the imports between them (importing module -> imported module pairs)\n")
    for u in units:
        out = ", ".join(f"{b} {n}" for (a, b), n in sorted(unit_imports.items()) if a == u)
        print(f"{u} -> {out or '-'}")
    unit_edges: dict[str, set[str]] = defaultdict(set)
    for a, b in unit_imports:
        unit_edges[a].add(b)
    print("\n## Strongly connected components (imports inside functions and TYPE_CHECKING included)\n")
    for component in strongly_connected(unit_edges) or [["none"]]:
        print(f"units, {len(component)}: {', '.join(component)}")
    modules_sccs = strongly_connected(module_edges)
    print(f"modules: {len(modules_sccs)} cycles of modules, {sum(map(len, modules_sccs))} modules in them")
    for component in modules_sccs:
        short = [m.removeprefix(ROOT_PACKAGE + ".") for m in component]
        print(f"  {len(component)}: {', '.join(short[:12])}{' …' if len(short) > 12 else ''}")
    lines = sorted(((len(p.read_text().splitlines()), n) for n, p in source_files()), reverse=True)
    print(f"\n## Module sizes ({len(lines)} modules, {sum(n for n, _ in lines):,} lines)\n")
    print(f"over 500 lines: {sum(n > 500 for n, _ in lines)}; over 300: {sum(n > 300 for n, _ in lines)}")
    print("largest:", ", ".join(f"{m.removeprefix('voltbus.')} {n}" for n, m in lines[:10]))
    funcs = function_sizes()
    median = statistics.median(n for n, _ in funcs)
    print(f"\n## Function sizes ({len(funcs)} functions and methods, median {median} lines)\n")
    print(f"over 50 lines: {sum(n > 50 for n, _ in funcs)}; over 40: {sum(n > 40 for n, _ in funcs)}")
    print("largest:", ", ".join(f"{f.removeprefix('voltbus.')} {n}" for n, f in funcs[:10]))


def contracts(config: Path = ROOT / "pyproject.toml") -> int:
    """Runs lint-imports (the contracts in ``config``) over the installed layout; its exit status."""
    with installed_layout() as tmp:
        # lint-imports puts its working folder first on sys.path: there, voltbus is the whole import root
        lint = Path(sys.executable).with_name("lint-imports")
        return subprocess.run([str(lint), "--no-cache", "--config", str(config)], cwd=tmp).returncode


if __name__ == "__main__":
    if sys.argv[1:] == ["contracts"]:
        sys.exit(contracts())
    report()
