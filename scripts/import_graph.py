"""Print the project's import graph: which layer imports which, and every import cycle between modules.

Reads the sources statically (``ast``; nothing is imported), so it runs without any extra installed::

    python scripts/import_graph.py                 # layers of the dripper package, then cycles
    python scripts/import_graph.py --depth 3       # finer layers (dripper.labelers.cpu, ...)
    python scripts/import_graph.py --modules       # every module-to-module edge
    python scripts/import_graph.py --check         # exit 1 on a cycle or an upward import (the test's rule)

A *layer* is a module path cut to ``--depth`` parts (``dripper.simplify``, ``dripper.eval``). Imports inside
functions count as much as those at the top of a module: a lazy import still ties the layers together.
Imports under ``if TYPE_CHECKING:`` count too: they never run, but a type named across two modules that
import each other is a cycle a reader follows all the same, and it is broken the same way, by moving the
shared names into a module both sides import downward.
``--check`` fails on any cycle between modules, inside a package as much as across layers, and holds the
order of :data:`LAYERS`: a layer may import only the layers listed before it.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "dripper.types",
        "dripper.hints",
        "dripper.lazy",
        "dripper.layout",
        "dripper.prompt",
        "dripper.decode",
        "dripper.io",
        "dripper.sandbox",
        "dripper.versions",
    ),
    ("dripper.config",),
    (
        "dripper.simplify",
        "dripper.markdown",
        "dripper.markdown_math",
        "dripper.markdown_text",
        "dripper.reconstruct",
    ),
    ("dripper.labelers", "dripper.fallback"),
    ("dripper.routing",),
    ("dripper.pipeline",),
    ("dripper.eval",),
    ("dripper.stages",),
    ("dripper.refine",),
    ("dripper.datatrove",),
    ("dripper.pretrain",),
    ("dripper.runs",),
    ("dripper.cli_train", "dripper.cli_run"),
    ("dripper.cli",),
    ("dripper.airflow",),
)
"""The layers, lowest first; each may import the ones before it (and itself), never one after it.

``dripper.eval`` sits above the pipeline (it scores extractors built from it); ``dripper.refine`` above the
stages (it reads their shards); ``dripper.runs`` is the run layer the CLI and the operators share.
"""


def module_files(roots: Iterable[str]) -> dict[str, Path]:
    """``{dotted module name: file}`` for every ``.py`` file under the given top-level packages."""
    found: dict[str, Path] = {}
    for root in roots:
        for path in sorted((REPO / root).rglob("*.py")):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (``a.b.c`` → ``a.b`` when ``c`` is a name)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``module`` imports, anywhere in its file (relative imports resolved), those
    under ``if TYPE_CHECKING:`` included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for name in names:
            target = _resolve(name, modules)
            if target and target != module:
                targets.add(target)
    return targets


def graph(roots: Iterable[str]) -> dict[str, set[str]]:
    """Module-level import edges of the project."""
    modules = module_files(roots)
    return {module: imports_of(module, path, modules) for module, path in modules.items()}


def layer(module: str, depth: int) -> str:
    return ".".join(module.split(".")[:depth])


def layer_edges(edges: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    result: dict[str, set[str]] = defaultdict(set)
    for source, targets in edges.items():
        for target in targets:
            if layer(source, depth) != layer(target, depth):
                result[layer(source, depth)].add(layer(target, depth))
    return result


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
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
    return sorted(found)


def layer_rank(name: str) -> int | None:
    """The position of the :data:`LAYERS` entry ``name`` falls under, ``None`` where none does."""
    for rank, members in enumerate(LAYERS):
        if any(name == member or name.startswith(member + ".") for member in members):
            return rank
    return None


def upward_imports(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """``(importer, imported)`` pairs where a module imports a module of a later layer of :data:`LAYERS`."""
    wrong = []
    for source, targets in sorted(edges.items()):
        for target in sorted(targets):
            mine, theirs = layer_rank(source), layer_rank(target)
            if mine is not None and theirs is not None and theirs > mine:
                wrong.append((source, target))
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--roots", nargs="+", default=["dripper"], help="top-level packages (default dripper)"
    )
    parser.add_argument("--depth", type=int, default=2, help="module parts that make a layer (default 2)")
    parser.add_argument("--modules", action="store_true", help="print every module-to-module edge")
    parser.add_argument("--check", action="store_true", help="exit 1 on a cycle or an upward import")
    args = parser.parse_args(argv)
    edges = graph(args.roots)
    if args.modules:
        for source in sorted(edges):
            for target in sorted(edges[source]):
                print(f"{source} -> {target}")
    print(f"# layers (depth {args.depth}): who imports whom")
    for source, targets in sorted(layer_edges(edges, args.depth).items()):
        print(f"{source} -> {', '.join(sorted(targets))}")
    found = cycles(edges)
    print(f"# import cycles between modules: {len(found)}")
    for component in found:
        print(" <-> ".join(component))
    wrong = upward_imports(edges) if args.check else []
    if args.check:
        print(f"# imports of a later layer: {len(wrong)}")
        for source, target in wrong:
            print(f"{source} -> {target}")
    return 1 if args.check and (found or wrong) else 0


if __name__ == "__main__":
    sys.exit(main())
