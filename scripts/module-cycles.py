#!/usr/bin/env python3
"""Fails when the modules of one crate import each other in a circle, file by file or folder by folder, or when the
crate's layout list is out of that order.

Usage: scripts/module-cycles.py [CRATE_DIR ...]   (default: every crates/*)
       scripts/module-cycles.py --order CRATE_DIR  (the crate's modules in dependency order, with their uses)
       scripts/module-cycles.py --self-test        (checks this script against crates it writes itself)

A module is one source file (`src/lib.rs` is the crate root, `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs`
is `a::b`). Module A depends on module B when A's code names an item of B: a `use` of `crate::…`, `super::…`,
`self::…` or a child module, or such a path written inline. A path is followed through re-exports (`pub use`,
`pub(crate) use`), so `crate::Error` leads to the module that defines `Error`, not to the crate root, and a
re-export is not itself an edge: a parent that re-exports its child's items does not depend on the child for it.
Declaring a child (`mod child;`) is not an edge either. Code after a `#[cfg(test)]` line at the top level of a
file (the unit tests) is not read: tests may use anything. Exit 0 when no crate has a cycle or a layout list
fault; 1 with each cycle named by its modules and one `file:line` per edge, and each fault; 2 on bad usage.

Folders: within each folder (the crate's `src/` included), each file and each subfolder counts as one module,
and these must not import each other in a circle either: `store/` and `upkeep/` with no file-level cycle can
still each use the other, and then neither stands above the other.

The layout list: a crate whose root (`lib.rs` or `main.rs`) has a `# Layout` section lists its top-level modules
there from the bottom up, one bullet (`- `) a step: a bullet's entries are separated by `;`, and an entry names
the modules it is about in backticks before its first `: ` (as `name`, `name.rs` or `name/`; a longer path such
as `name/file.rs` names `name/`). A module counts where it is first named so. Every top-level module must be
named, and none may use a module named after it. Test modules (declared under `#[cfg(test)]`) are left out.
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
    # Character literals before strings: '"' would otherwise open a string that swallows the code after it.
    text = re.sub(r"'(?:\\u\{[0-9a-fA-F]+\}|\\.|[^\\'\n])'", "' '", text)
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
        # Modules declared only in test code (`#[cfg(test)] mod tests;`) are tests, not modules of the crate.
        declared = {m for m in self.mods if not m or m[-1] in self.children.get(m[:-1], ())}
        while declared != set(self.mods):
            for gone in set(self.mods) - declared:
                del self.mods[gone]
                self.texts.pop(gone, None)
                self.children.pop(gone, None)
            declared = {m for m in self.mods if not m or (m[:-1] in self.mods and m[-1] in self.children.get(m[:-1], ()))}
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
    """Prints the cycles of one crate, file and folder level, and the faults of its layout list; returns how many."""
    src = os.path.join(crate_dir, "src")
    crate = Crate(src)
    edges = crate.edges()
    found = cycles(edges, crate.mods)
    extra = check_folders(crate_dir, crate, edges), check_layout(crate_dir, crate, edges)
    for comp in found:
        print(f"{crate_dir}: import cycle between {', '.join(name(m) for m in comp)}:")
        members = set(comp)
        for (a, b), line in sorted(edges.items()):
            if a in members and b in members:
                rel = os.path.relpath(crate.mods[a])
                print(f"    {name(a)} -> {name(b)}   ({rel}:{line})")
    return len(found) + extra[0], extra[1]


def unit(module, folder):
    """The unit that `module` (under `folder`) counts as within `folder`: the folder's own file, or the file or
    subfolder of the folder that holds it."""
    return module if module == folder else folder + (module[len(folder)],)


def is_folder(crate, m):
    return any(len(other) > len(m) and other[: len(m)] == m for other in crate.mods)


def folder_edges(crate, edges):
    """(folder, from, to) -> (file, file, line) of the first edge between two units of one folder."""
    folders = {m[:k] for m in crate.mods for k in range(len(m))}
    found = {}
    for (a, b), line in edges.items():
        for folder in folders:
            n = len(folder)
            if a[:n] != folder or b[:n] != folder:
                continue
            ua, ub = unit(a, folder), unit(b, folder)
            if ua != ub:
                found.setdefault((folder, ua, ub), (a, b, line))
    return found


def unit_name(crate, m):
    return name(m) + ("/" if is_folder(crate, m) else "")


def check_folders(crate_dir, crate, edges):
    """Prints the folder-level cycles of one crate (those the file level does not show); returns how many."""
    fedges = folder_edges(crate, edges)
    total = 0
    for folder in sorted({f for f, _, _ in fedges}):
        pairs = {(a, b): v for (f, a, b), v in fedges.items() if f == folder}
        nodes = {a for a, _ in pairs} | {b for _, b in pairs}
        for comp in cycles(pairs, nodes):
            if not any(m != folder and is_folder(crate, m) for m in comp):
                continue  # files only: the file-level check reports it
            total += 1
            where = name(folder) if folder else "src"
            print(f"{crate_dir}: folder-level import cycle in {where} between "
                  f"{', '.join(unit_name(crate, m) for m in comp)} (a folder counts as one module):")
            members = set(comp)
            for (a, b), (fa, fb, line) in sorted(pairs.items()):
                if a in members and b in members:
                    rel = os.path.relpath(crate.mods[fa])
                    print(f"    {name(fa)} -> {name(fb)}   ({rel}:{line})")
    return total


LAYOUT_TOKEN_RE = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)((?:/|\.rs|::)[^`]*)?`")


def check_layout(crate_dir, crate, edges):
    """Checks the `# Layout` list of the crate root against the top-level modules; returns how many faults."""
    src = os.path.join(crate_dir, "src")
    root = next((os.path.join(src, f) for f in ("lib.rs", "main.rs") if os.path.exists(os.path.join(src, f))), None)
    if root is None:
        return 0
    doc, inside = [], False
    for line in open(root, encoding="utf-8"):
        if not line.startswith("//!"):
            if inside:
                break
            continue
        text = line[3:].strip()
        if re.match(r"#+\s*Layout\b", text):
            inside = True
            continue
        if inside and text.startswith("#"):
            break
        if inside:
            doc.append(text)
    if not inside:
        return 0
    tops = {m[0] for m in crate.mods if m}
    bullets = []
    for text in doc:
        if text.startswith("- "):
            bullets.append(text[2:])
        elif bullets:
            bullets[-1] += " " + text
    order = []
    for bullet in bullets:
        for segment in bullet.split(";"):
            head = segment.split(": ", 1)[0] if ": " in segment else ""
            for mt in LAYOUT_TOKEN_RE.finditer(head):
                top = mt.group(1)
                if top in tops and top not in order:
                    order.append(top)
    faults = 0
    rel = os.path.relpath(root)
    for top in sorted(tops - set(order)):
        faults += 1
        print(f"{crate_dir}: {rel}'s layout list does not name the module {unit_name(crate, (top,))}")
    position = {top: k for k, top in enumerate(order)}
    seen = set()
    for (a, b), line in sorted(edges.items()):
        if not a or not b or a[0] == b[0]:
            continue
        ta, tb = a[0], b[0]
        if ta in position and tb in position and position[tb] > position[ta] and (ta, tb) not in seen:
            seen.add((ta, tb))
            faults += 1
            print(f"{crate_dir}: {rel}'s layout list names {unit_name(crate, (ta,))} before "
                  f"{unit_name(crate, (tb,))}, which it uses ({os.path.relpath(crate.mods[a])}:{line})")
    return faults


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
    "quote_char": {
        "lib.rs": "pub mod a;\npub mod b;\n",
        "a.rs": "pub fn q() -> char { '\"' }\npub fn f() { crate::b::g(); }\npub const S: &str = \"s\";\n",
        "b.rs": "pub fn g() { let _ = '\\''; crate::a::q(); }\n",
    },
    "cyclic": {
        "lib.rs": "pub mod config;\npub mod layout;\npub use config::parse_size;\n",
        "config.rs": "use crate::layout::{self, KIB};\n/// crate::nothing in a comment\npub fn parse_size() -> u64 { KIB }\n",
        "layout.rs": "pub const KIB: u64 = 1024;\npub fn f() -> u64 { crate::parse_size() }\n",
    },
    "folders": {
        "lib.rs": "pub mod store;\npub mod upkeep;\n",
        "store/mod.rs": "mod put;\npub struct Store;\nimpl Store { fn gc(&self) { crate::upkeep::gc::run(); } }\n",
        "store/put.rs": "pub fn commit() {}\n",
        "upkeep/mod.rs": "pub mod gc;\n",
        "upkeep/gc.rs": "pub fn run() { crate::store::put::commit(); }\n",
    },
    "layout_list": {
        "lib.rs": "//! # Layout\n//! Uses `layout`: prose.\n//! - `store/`: the API; see `units`.\n//! - `units.rs`: sizes.\n//! # Other\n//! - `layout`: elsewhere.\n"
        "pub mod units;\npub mod store;\npub mod layout;\n",
        "units.rs": "pub const KIB: u64 = 1024;\n",
        "store/mod.rs": "pub fn f() -> u64 { crate::units::KIB }\n",
        "layout.rs": "pub fn g() {}\n",
    },
    "child_and_parent": {
        "lib.rs": "pub mod store;\n",
        "store/mod.rs": "mod read;\npub struct S;\nfn g() { read::stream(); }\n",
        "store/read.rs": "use super::S;\npub fn stream() {}\n",
    },
}


def self_test():
    # layout_list: `layout` is not named in the list, and `store/` is named before `units.rs`, which it uses.
    expected = {"acyclic": 0, "quote_char": 1, "cyclic": 1, "folders": 1, "layout_list": 2, "child_and_parent": 1}
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for case, files in SELF_TEST.items():
            for rel, text in files.items():
                path = os.path.join(tmp, case, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            got = sum(check(os.path.join(tmp, case)))
            ok = got == expected[case]
            failures += not ok
            print(f"module-cycles self-test {case}: {'ok' if ok else 'FAILED'} ({got} found, {expected[case]} expected)")
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
    results = [check(c) for c in crates]
    cycles_found = sum(c for c, _ in results)
    faults = sum(f for _, f in results)
    print(f"module-cycles: {len(crates)} crates, {cycles_found} import cycles, {faults} layout list faults")
    return 1 if cycles_found or faults else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
