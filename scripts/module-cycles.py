#!/usr/bin/env python3
"""Fails when the modules of one crate import each other in a circle.

Usage: scripts/module-cycles.py [CRATE_DIR ...]   (default: every crates/*)
       scripts/module-cycles.py --order CRATE_DIR  (the crate's modules in dependency order, with their uses)
       scripts/module-cycles.py --self-test        (checks this script against crates it writes itself)

A module is one source file (`src/lib.rs` is the crate root, `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs`
is `a::b`). Module A depends on module B when A's code names an item of B: a `use` of `crate::…`, `super::…`,
`self::…` or a child module, or such a path written inline. A path is followed through re-exports (`pub use`,
`pub(crate) use`), so `crate::Error` leads to the module that defines `Error`, not to the crate root, and a
re-export is not itself an edge: a parent that re-exports its child's items does not depend on the child for it.
Declaring a child (`mod child;`) is not an edge either. Code after a `#[cfg(test)]` line at the top level of a
file (the unit tests) is not read: tests may use anything. Exit 0 when no crate has a cycle; 1 with each cycle
named by its modules and one `file:line` per edge; 2 on bad usage.
"""

import os
import re
import sys
import tempfile

PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"^\s*(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);", re.S | re.M)
MOD_RE = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", re.M)
IDENT_PATH_RE = re.compile(r"(?<![:\w])([a-z_][a-z0-9_]*)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")


def modules_of(src):
    """Maps each module path (a tuple of names; () is the root) to its file."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            rel = os.path.relpath(os.path.join(dirpath, f), src)
            parts = rel[:-3].split(os.sep)
            if parts == ["lib"] or parts == ["main"]:
                parts = []
            elif parts[-1] == "mod":
                parts = parts[:-1]
            mods[tuple(parts)] = os.path.join(dirpath, f)
    return mods


def strip(text):
    """The text without comments, string literals and the top-level test code, line numbers kept."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r'r#*"(?:.|\n)*?"#*|"(?:\\.|[^"\\])*"', lambda m: "\n" * m.group(0).count("\n"), text)
    m = re.search(r"^#\[cfg\(test\)\]", text, re.M)
    return text[: m.start()] if m else text


def expand_use(tree):
    """`a::{b, c::{d, self}}` -> [[a, b], [a, c, d], [a, c]]; globs end at their module."""
    tree = re.sub(r"\s+", "", tree)
    out = []

    def parse(i, prefix):
        segs, word = list(prefix), ""
        while i < len(tree) and tree[i] not in ",}":
            if tree[i] == "{":
                segs += [p for p in word.split("::") if p]
                i += 1
                while i < len(tree) and tree[i] != "}":
                    i = parse(i, segs)
                    if i < len(tree) and tree[i] == ",":
                        i += 1
                return i + 1
            word += tree[i]
            i += 1
        segs += [p for p in word.split("::") if p]
        while segs and segs[-1] in ("*", "self"):
            segs = segs[:-1]
        if segs:
            out.append(segs)
        return i

    parse(0, [])
    return out


def use_paths(stmt):
    """The paths of one use statement's tree, renames dropped."""
    stmt = re.sub(r"\s+as\s+[A-Za-z_]\w*", "", stmt)
    return expand_use(stmt)


class Crate:
    def __init__(self, src):
        self.mods = modules_of(src)
        self.texts = {m: strip(open(f, encoding="utf-8").read()) for m, f in self.mods.items()}
        self.aliases = {}  # (module, name) -> absolute path (list of names)
        self.children = {m: set(MOD_RE.findall(t)) for m, t in self.texts.items()}
        for m, t in self.texts.items():
            for vis, tree in USE_RE.findall(t):
                if not vis:
                    continue
                for path in use_paths(tree):
                    absolute = self.absolute(m, path)
                    if absolute:
                        self.aliases[(m, absolute[-1])] = absolute

    def absolute(self, here, path):
        """`path` as written in module `here`, from the crate root; None for another crate's path."""
        head, rest = path[0], path[1:]
        if head == "crate":
            return list(rest)
        if head == "self":
            return list(here) + list(rest)
        if head == "super":
            base = list(here)
            while path and path[0] == "super":
                base = base[:-1]
                path = path[1:]
            return base + list(path)
        if head in self.children.get(here, ()):
            return list(here) + list(path)
        return None

    def owner(self, path, seen=None):
        """The module that defines the item `path` names (an absolute path), following re-exports."""
        seen = seen or set()
        module = ()
        for i, name in enumerate(path):
            if module + (name,) in self.mods:
                module = module + (name,)
                continue
            key = (module, name)
            if key in self.aliases and key not in seen:
                seen.add(key)
                return self.owner(self.aliases[key] + list(path[i + 1 :]), seen)
            return module
        return module

    def edges(self):
        """(from, to) -> the first line of `from` that makes the edge."""
        found = {}
        for m, t in self.texts.items():
            refs = []
            for vis, tree in USE_RE.findall(t):
                if vis:
                    continue
                line = t[: t.find(tree)].count("\n") + 1
                refs += [(p, line) for p in use_paths(tree)]
            without_uses = USE_RE.sub(lambda x: "\n" * x.group(0).count("\n"), t)
            for rx in (PATH_RE, IDENT_PATH_RE):
                for mt in rx.finditer(without_uses):
                    path = [mt.group(1)] + mt.group(2).split("::")[1:]
                    refs.append((path, without_uses[: mt.start()].count("\n") + 1))
            for path, line in refs:
                absolute = self.absolute(m, path)
                if absolute is None:
                    continue
                to = self.owner(absolute)
                if to != m and to in self.mods and to != ():
                    found.setdefault((m, to), line)
        return found


def cycles(edges, nodes):
    """The strongly connected components of more than one module (Tarjan)."""
    graph = {n: [] for n in nodes}
    for a, b in edges:
        graph[a].append(b)
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
                out.append(sorted(comp))

    for n in sorted(nodes):
        if n not in index:
            visit(n)
    return out


def name(m):
    return "::".join(m) or "crate"


def check(crate_dir):
    """Prints the cycles of one crate; returns how many."""
    src = os.path.join(crate_dir, "src")
    crate = Crate(src)
    edges = crate.edges()
    found = cycles(edges, crate.mods)
    for comp in found:
        print(f"{crate_dir}: import cycle between {', '.join(name(m) for m in comp)}:")
        members = set(comp)
        for (a, b), line in sorted(edges.items()):
            if a in members and b in members:
                rel = os.path.relpath(crate.mods[a])
                print(f"    {name(a)} -> {name(b)}   ({rel}:{line})")
    return len(found)


SELF_TEST = {
    "acyclic": {
        "lib.rs": "pub mod units;\npub mod layout;\nmod store;\npub use units::KIB;\npub use store::Store;\n",
        "units.rs": "pub const KIB: u64 = 1024;\n",
        "layout.rs": "use crate::KIB;\npub fn size() -> u64 { KIB }\n",
        "store/mod.rs": "mod write;\npub use write::Store;\n",
        "store/write.rs": "use crate::layout;\npub struct Store;\n"
        "impl Store { fn f() -> u64 { layout::size() + super::super::units::KIB } }\n"
        "#[cfg(test)]\nmod tests { use crate::store::Store; }\n",
    },
    "cyclic": {
        "lib.rs": "pub mod config;\npub mod layout;\npub use config::parse_size;\n",
        "config.rs": "use crate::layout::{self, KIB};\n/// crate::nothing in a comment\npub fn parse_size() -> u64 { KIB }\n",
        "layout.rs": "pub const KIB: u64 = 1024;\npub fn f() -> u64 { crate::parse_size() }\n",
    },
    "child_and_parent": {
        "lib.rs": "pub mod store;\n",
        "store/mod.rs": "mod read;\npub struct S;\nfn g() { read::stream(); }\n",
        "store/read.rs": "use super::S;\npub fn stream() {}\n",
    },
}


def self_test():
    expected = {"acyclic": 0, "cyclic": 1, "child_and_parent": 1}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case, files in SELF_TEST.items():
            for rel, text in files.items():
                path = os.path.join(tmp, case, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            got = check(os.path.join(tmp, case))
            ok = got == expected[case]
            failures += not ok
            print(f"module-cycles self-test {case}: {'ok' if ok else 'FAILED'} ({got} cycles, {expected[case]} expected)")
    print(f"module-cycles: {len(expected) - failures} passed, {failures} failed")
    return 1 if failures else 0


def order(crate_dir):
    """Prints the modules of one crate in an order where each uses only those before it (ties by name)."""
    crate = Crate(os.path.join(crate_dir, "src"))
    edges = crate.edges()
    left = set(crate.mods) - {()}
    while left:
        ready = sorted(m for m in left if not any((m, b) in edges for b in left if b != m))
        if not ready:
            print("(a cycle is left: " + ", ".join(name(m) for m in sorted(left)) + ")")
            return 1
        for m in ready:
            deps = sorted(name(b) for (a, b) in edges if a == m)
            print(f"{name(m)}: {', '.join(deps)}")
        left -= set(ready)
    return 0


def main(args):
    if args == ["--self-test"]:
        return self_test()
    if len(args) == 2 and args[0] == "--order":
        return order(args[1])
    if any(a.startswith("-") for a in args):
        print(__doc__, file=sys.stderr)
        return 2
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    crates = args or sorted(
        os.path.join(root, "crates", c) for c in os.listdir(os.path.join(root, "crates"))
    )
    total = sum(check(c) for c in crates)
    print(f"module-cycles: {len(crates)} crates, {total} import cycles")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
