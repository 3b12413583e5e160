"""kbert's layers, drawn from its imports: every `import` in `kbert/` — at module level, inside
functions and under `if TYPE_CHECKING:` alike, and the modules a package loads on first use
(`kbert._lazy`) — between its parts (a top-level module, or a package with everything in it).

    python .ci/layers.py            prints the picture, the circles and the arrows that run up
    python .ci/layers.py --write    redraws the picture in docs/architecture.md
    python .ci/layers.py --check    fails unless there is no circle (between parts, or between
                                    the modules of a package) and the picture is up to date

A part's floor is one above the highest part it imports (floor 0 imports no other part), so
with no circle every arrow runs down.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "kbert"
DOC = ROOT / "docs" / "architecture.md"
BEGIN, END = "<!-- layers: begin (python .ci/layers.py --write) -->", "<!-- layers: end -->"


def modules() -> dict[str, Path]:
    """{dotted name: file} of every module in kbert (a package by its `__init__.py`)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The kbert modules `name` imports, anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lazy = any(isinstance(n, ast.ImportFrom) and n.module == "kbert._lazy" for n in ast.walk(tree))
    for node in ast.walk(tree):
        # a package's names loaded on first use (`kbert._lazy`): the modules named are imports
        if lazy and isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and node.value in known:
            found.add(node.value)
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    out = set()
    for target in found:
        while target and target not in known:      # `import kbert.x.y` of a name in x
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def part(module: str) -> str:
    """The part a module belongs to: kbert.X for kbert.X.Y..., the root `kbert` itself."""
    return ".".join(module.split(".")[:2])


def graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """({module: modules it imports}, {part: parts it imports})."""
    known = modules()
    by_module = {m: imports(m, p, known) for m, p in known.items()}
    by_part: dict[str, set[str]] = defaultdict(set)
    for m, targets in by_module.items():
        by_part[part(m)].update(part(t) for t in targets if part(t) != part(m))
    return by_module, dict(by_part)


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                out.append(sorted(scc))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def floors(edges: dict[str, set[str]]) -> dict[str, int]:
    """Each node's floor: 0 if it imports nothing, else one above what it imports (nodes in
    a circle share the floor the circle would have as one node)."""
    memo: dict[str, int] = {}

    def floor(v: str, seen: frozenset[str]) -> int:
        if v in memo:
            return memo[v]
        below = [floor(w, seen | {v}) for w in edges.get(v, ()) if w not in seen | {v}]
        memo[v] = 1 + max(below) if below else 0
        return memo[v]

    for v in edges:
        floor(v, frozenset())
    return memo


def picture(edges: dict[str, set[str]]) -> str:
    """The parts floor by floor, top first; each with the parts it imports on the floor just
    below and how many further down."""
    level = floors(edges)
    nodes = sorted(set(edges) | {t for ts in edges.values() for t in ts})
    for n in nodes:
        level.setdefault(n, 0)
    short = {n: n.removeprefix("kbert.") if n != "kbert" else "kbert (the root: the facade)"
             for n in nodes}
    lines = []
    arrows = sum(len(ts) for ts in edges.values())
    top = max(level.values())
    lines.append(f"{len(nodes)} parts on {top + 1} floors, {arrows} arrows "
                 f"(an arrow: the part imports the other)")
    lines.append("")
    for f in range(top, -1, -1):
        here = [n for n in nodes if level[n] == f]
        lines.append(f"floor {f:2d}  " + "  ".join(short[n] for n in here))
        for n in here:
            targets = sorted(edges.get(n, ()), key=lambda t: (-level[t], t))
            if targets:
                lines.append(f"{'':10}{short[n]} ─▶ " + ", ".join(
                    short[t] for t in targets))
    return "\n".join(lines)


def _block() -> tuple[str, int, int]:
    """docs/architecture.md's text and where its picture starts and ends."""
    text = DOC.read_text(encoding="utf-8")
    return text, text.index(BEGIN) + len(BEGIN), text.index(END)


def problems() -> list[str]:
    """Each circle (between parts, and between modules: one inside a package shows only
    there), and a picture in the docs that is not the code's; [] when all is well."""
    by_module, by_part = graph()
    found = [f"circle between parts: {' ↔ '.join(c)}" for c in circles(by_part)]
    found += [f"circle between modules: {' ↔ '.join(c)}" for c in circles(by_module)]
    text, start, end = _block()
    if text[start:end] != f"\n```\n{picture(by_part)}\n```\n":
        found.append("docs/architecture.md's picture is not the code's: run "
                     "python .ci/layers.py --write")
    return found


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    args.add_argument("--write", action="store_true", help="redraw docs/architecture.md")
    args.add_argument("--check", action="store_true",
                      help="fail on a circle or a stale picture")
    opts = args.parse_args()
    _, by_part = graph()
    if opts.write:
        text, start, end = _block()
        DOC.write_text(f"{text[:start]}\n```\n{picture(by_part)}\n```\n{text[end:]}",
                       encoding="utf-8")
    elif not opts.check:
        print(picture(by_part))
    found = problems()
    for p in found:
        print(p, file=sys.stderr)
    return 1 if found and opts.check else 0


if __name__ == "__main__":
    sys.exit(main())
