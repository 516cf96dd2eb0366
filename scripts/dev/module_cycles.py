#!/usr/bin/env python3
"""Import cycles between the modules of one crate.

Usage: scripts/dev/module_cycles.py CRATE_SRC_DIR [--depth N]

Each `.rs` file under the source directory is a module (`a/b.rs` and `a/b/mod.rs` are
`a::b`). A module depends on another when it names it through `crate::…`, `super::…` or
`self::…` (grouped `use crate::{a::b, c}` forms included). Edges between a module and its
own ancestors or descendants are left out (a parent re-exporting its child is not a
cycle); unit-test files (`tests.rs`, `*_tests.rs`) are left out. `--depth N` folds
modules to their first N path segments (1 = the crate's top-level rooms). Prints each
strongly connected component of more than one module, then a count.
"""
import os
import re
import sys


def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            if rel and (rel[-1] == "tests" or rel[-1].endswith("_tests")):
                continue
            mods[tuple(rel)] = path
    return mods


def strip_comments(text):
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"/\*.*?\*/", "", text, flags=re.S)


def expand(prefix, body):
    """Expands a `use` tree body `a::{b, c::d}` into full paths."""
    out, depth, cur = [], 0, ""
    parts = []
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    for p in parts:
        p = p.strip()
        if not p:
            continue
        m = re.match(r"^([\w:]*?)(?:::)?\{(.*)\}$", p, flags=re.S)
        if m:
            head = [s for s in m.group(1).split("::") if s]
            out += expand(prefix + head, m.group(2))
        else:
            out.append(prefix + [s for s in re.split(r"::|\s+as\s+", p)[0].split("::") if s])
    return out


def references(text, me):
    text = strip_comments(text)
    refs = []
    for m in re.finditer(r"\b(crate|super|self)::\{([^;]*?)\};", text, flags=re.S):
        base = resolve(m.group(1), me)
        refs += [base + p for p in expand([], m.group(2))]
    for m in re.finditer(r"\b((?:crate|super|self)(?:::(?:super|self))*)((?:::\w+)+)", text):
        heads = m.group(1).split("::")
        base = resolve(heads[0], me)
        for h in heads[1:]:
            base = base[:-1] if h == "super" else base
        refs.append(base + [s for s in m.group(2).split("::") if s])
    return refs


def resolve(head, me):
    if head == "crate":
        return []
    if head == "super":
        return list(me[:-1])
    return list(me)


def main():
    src = sys.argv[1]
    depth = int(sys.argv[sys.argv.index("--depth") + 1]) if "--depth" in sys.argv else None
    mods = modules(src)
    fold = (lambda m: m[:depth]) if depth else (lambda m: m)
    edges = {}
    for me, path in mods.items():
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        for ref in references(text, me):
            target = None
            for n in range(len(ref), 0, -1):
                if tuple(ref[:n]) in mods:
                    target = tuple(ref[:n])
                    break
            if target is None or target == me:
                continue
            if target[: len(me)] == me or me[: len(target)] == target:
                continue
            a, b = fold(me), fold(target)
            if a != b and a[: len(b)] != b and b[: len(a)] != a:
                edges.setdefault(a, set()).add(b)
    # Tarjan's strongly connected components.
    index, low, stack, on, comps, counter = {}, {}, [], set(), [], [0]
    nodes = set(edges) | {b for bs in edges.values() for b in bs}

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    for comp in comps:
        print(" <-> ".join(sorted("::".join(m) or "crate" for m in comp)))
    print(f"{len(comps)} cycle(s) in {src}")


if __name__ == "__main__":
    main()
