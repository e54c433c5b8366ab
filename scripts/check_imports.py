"""Import loops and layer order of the workspace's crates (scripts/check-imports.sh).

For each crate directory, the module graph is built from the files under
src/ (a module is a file: lib.rs is the root, a/mod.rs and a.rs are `a`,
a/b.rs is `a::b`; main.rs and src/bin are crates of their own and are left
out). An edge is every in-crate path a module names: `use` trees (grouped,
renamed, globbed), `crate::`/`super::`/`self::` paths in code, paths through
a name a `use` brought in, and `crate::`/`super::`/`self::` paths in doc
comments (a doc link is resolved by rustdoc and ties the modules as much as
a `use` does). A path through a `pub use` is followed to the module that
defines the item. Test code is left out: `#[cfg(test)]` items and modules,
and tests.rs files.

Each edge is then looked at where the two modules part: between the two
children of their closest common folder (`raft::storage` -> `raft::write`,
`api` -> `control`). A module naming its own ancestor or descendant is how a
folder's mod.rs and its files work and is not an edge. Within every folder
the edges must form no loop.

A crate whose lib.rs has a `# Layout` section listing its top-level modules
as `//! - [`name`]` or `//! - `name`` bullets is checked against that order
too: a module may name only the modules listed above its own.

Exits 1 naming every loop and every upward import, 0 when there are none.
"""

import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
DEFINES = r"\b(?:struct|enum|union|fn|trait|type|const|static|mod|macro_rules!)\s+{}\b"


# ---------------------------------------------------------------- scanning


def scan(src):
    """Splits Rust source into code and doc text of the same length (so
    offsets and line numbers agree): comments and string literals are
    blanked out of the code, and the doc text keeps only `///` and `//!`
    comments."""
    code, doc = list(src), [" " if c != "\n" else "\n" for c in src]
    n, i = len(src), 0

    def blank(a, b):
        for k in range(a, b):
            if code[k] != "\n":
                code[k] = " "

    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j == -1 else j
            if (src.startswith("///", i) and not src.startswith("////", i)) or src.startswith("//!", i):
                for k in range(i + 3, j):
                    doc[k] = src[k]
            blank(i, j)
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(i, j)
            i = j
        elif c in "rb" and (i == 0 or not (src[i - 1].isalnum() or src[i - 1] == "_")):
            m = re.match(r'(?:br|r)(#*)"', src[i:]) if c in "rb" else None
            if m:
                end = src.find('"' + m.group(1), i + m.end())
                end = n if end == -1 else end + 1 + len(m.group(1))
                blank(i, end)
                i = end
            elif src.startswith('b"', i) or src.startswith("b'", i):
                i += 1
            else:
                i += 1
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            blank(i, j + 1)
            i = j + 1
        elif c == "'":
            # A char literal, or a lifetime (left alone).
            if i + 1 < n and src[i + 1] == "\\":
                j = src.find("'", i + 2)
                j = n if j == -1 else j
                blank(i, j + 1)
                i = j + 1
            elif i + 2 < n and src[i + 2] == "'":
                blank(i, i + 3)
                i += 3
            else:
                i += 1
        else:
            i += 1
    return "".join(code), "".join(doc)


def matching(code, i):
    """The index just past the brace block that opens at code[i]."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j + 1
    return len(code)


def strip_tests(code, doc):
    """Blanks every `#[cfg(test)]` item out of code and doc; returns them and
    the names of the test modules declared as files (`#[cfg(test)] mod x;`)."""
    test_files = set()
    code, doc = list(code), list(doc)
    text = "".join(code)
    for m in re.finditer(r"#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]", text):
        j = m.end()
        # Further attributes on the same item.
        while True:
            a = re.match(r"\s*#\s*\[", text[j:])
            if not a:
                break
            depth, k = 0, j + a.end() - 1
            while k < len(text):
                depth += {"[": 1, "]": -1}.get(text[k], 0)
                k += 1
                if depth == 0:
                    break
            j = k
        k = j
        while k < len(text) and text[k] not in ";{":
            k += 1
        item = text[j:k]
        end = k + 1 if k < len(text) and text[k] == ";" else matching(text, k)
        mod = re.match(r"\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*$", item)
        if mod and k < len(text) and text[k] == ";":
            test_files.add(mod.group(1))
        for x in range(m.start(), end):
            if code[x] != "\n":
                code[x] = " "
                doc[x] = " "
    return "".join(code), "".join(doc), test_files


def inline_mods(code):
    """(start, end, name) of each inline `mod name { ... }` left in code."""
    out = []
    for m in re.finditer(r"\bmod\s+(" + IDENT + r")\s*\{", code):
        out.append((m.start(), matching(code, m.end() - 1), m.group(1)))
    return out


def parse_use_tree(text):
    """The paths a `use` tree names: (segments, local name or None, glob)."""
    toks = re.findall(IDENT + r"|::|[{},*]", text)
    pos = 0

    def tree(prefix):
        nonlocal pos
        out = []
        segs = list(prefix)
        if pos < len(toks) and toks[pos] == "::":
            pos += 1
            if not segs:
                segs = ["::"]
        while pos < len(toks):
            t = toks[pos]
            if t == "{":
                pos += 1
                while pos < len(toks) and toks[pos] != "}":
                    out += tree(segs)
                    if pos < len(toks) and toks[pos] == ",":
                        pos += 1
                pos += 1
                return out
            if t == "*":
                pos += 1
                return out + [(segs, None, True)]
            if t in (",", "}"):
                break
            if t == "::":
                pos += 1
                continue
            if t == "as":
                pos += 1
                alias = toks[pos] if pos < len(toks) else None
                pos += 1
                if segs and segs[-1] == "self":
                    segs = segs[:-1]
                return out + [(segs, alias, False)]
            segs = segs + [t]
            pos += 1
        if segs and segs[-1] == "self" and len(segs) > 1:
            segs = segs[:-1]
        return out + [(segs, segs[-1] if segs else None, False)]

    return tree([])


# ---------------------------------------------------------------- the crate


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of names; () is the crate root
        self.file = file
        self.code = self.doc = ""
        self.test_files = set()
        self.inline = []
        self.uses = []  # (offset, visibility, segments, local name, glob)


class Crate:
    def __init__(self, root):
        self.root = root
        self.name = os.path.basename(os.path.abspath(root))
        self.mods = {}
        src = os.path.join(root, "src")
        for dirpath, dirs, files in os.walk(src):
            dirs.sort()
            rel = os.path.relpath(dirpath, src)
            parts = () if rel == "." else tuple(rel.split(os.sep))
            if parts[:1] == ("bin",):
                continue
            for f in sorted(files):
                if not f.endswith(".rs") or f == "tests.rs":
                    continue
                if parts == () and f == "main.rs":
                    continue
                if f in ("mod.rs",) or (parts == () and f == "lib.rs"):
                    path = parts
                else:
                    path = parts + (f[:-3],)
                self.mods[path] = Module(path, os.path.join(dirpath, f))
        for m in self.mods.values():
            with open(m.file, encoding="utf-8") as fh:
                src_text = fh.read()
            code, doc = scan(src_text)
            m.code, m.doc, m.test_files = strip_tests(code, doc)
            m.src = src_text
            m.inline = inline_mods(m.code)
            for u in re.finditer(r"(?:\b(pub)\s*(\([^)]*\))?\s+)?\buse\s+([^;]*);", m.code):
                for segs, local, glob in parse_use_tree(u.group(3)):
                    m.uses.append((u.start(), bool(u.group(1)), segs, local, glob))
        # Modules declared `#[cfg(test)] mod x;` and everything under them.
        dropped = {p + (t,) for p, m in self.mods.items() for t in m.test_files}
        self.mods = {p: m for p, m in self.mods.items() if not any(p[: len(d)] == d for d in dropped)}
        self.reexports = {}
        self.globs = defaultdict(list)
        for m in self.mods.values():
            table = {}
            for off, public, segs, local, glob in m.uses:
                if not public:
                    continue
                target = self.absolute(m, off, segs)
                if glob:
                    if target is not None:
                        self.globs[m.path].append(target)
                elif local:
                    table[local] = target
            self.reexports[m.path] = table

    def scope(self, m, off):
        """The module path at offset `off` of m's file, inline modules included."""
        names = [name for a, b, name in m.inline if a <= off < b]
        return m.path + tuple(names)

    def absolute(self, m, off, segs, aliases=None):
        """segs made absolute from the crate root, or None outside the crate."""
        if not segs or segs[0] == "::":
            return None
        here = self.scope(m, off)
        if segs[0] == "crate":
            return tuple(segs[1:])
        if segs[0] in ("self", "super"):
            cur = list(here)
            i = 0
            while i < len(segs) and segs[i] in ("self", "super"):
                if segs[i] == "super":
                    if not cur:
                        return None
                    cur.pop()
                i += 1
            return tuple(cur) + tuple(segs[i:])
        if here + (segs[0],) in self.mods:
            return here + tuple(segs)
        if aliases and segs[0] in aliases and aliases[segs[0]] is not None:
            return aliases[segs[0]] + tuple(segs[1:])
        return None

    def defines(self, path, name):
        m = self.mods.get(path)
        return bool(m) and re.search(DEFINES.format(re.escape(name)), m.code) is not None

    def resolve(self, segs, depth=0):
        """The module that defines what an absolute path names."""
        cur = ()
        i = 0
        while i < len(segs):
            s = segs[i]
            if cur + (s,) in self.mods:
                cur, i = cur + (s,), i + 1
                continue
            if depth < 16:
                table = self.reexports.get(cur, {})
                if s in table:
                    if table[s] is None:
                        return cur
                    return self.resolve(table[s] + tuple(segs[i + 1 :]), depth + 1)
                for g in self.globs.get(cur, []):
                    if self.defines(g, s) or g + (s,) in self.mods or s in self.reexports.get(g, {}):
                        return self.resolve(g + tuple(segs[i:]), depth + 1)
            return cur
        return cur

    def edges(self):
        """(from module, to module, file, line) for every in-crate path."""
        out = []
        for m in self.mods.values():
            aliases = {}
            for off, _, segs, local, glob in m.uses:
                if local and not glob:
                    aliases[local] = self.absolute(m, off, segs)

            def add(off, segs, m=m):
                target = self.absolute(m, off, segs, aliases)
                if target is None:
                    return
                to = self.resolve(target)
                line = m.code.count("\n", 0, off) + 1
                out.append((m.path, to, m.file, line))

            for off, _, segs, _, _ in m.uses:
                add(off, segs)
            code = re.sub(r"(?:\bpub\s*(?:\([^)]*\))?\s+)?\buse\s+[^;]*;", lambda x: " " * len(x.group(0)), m.code)
            path_re = r"(?<![\w:])(" + IDENT + r"(?:\s*::\s*" + IDENT + r")+)"
            for p in re.finditer(path_re, code):
                segs = [s.strip() for s in p.group(1).split("::")]
                if segs[0] in ("crate", "self", "super") or segs[0] in aliases or self.scope(m, p.start()) + (segs[0],) in self.mods:
                    add(p.start(), segs)
            for p in re.finditer(r"(?<![\w:])((?:crate|self|super)(?:::" + IDENT + r")+)", m.doc):
                add(p.start(), p.group(1).split("::"))
        return out

    def layers(self):
        """The top-level modules in the order lib.rs's `# Layout` lists them."""
        lib = self.mods.get(())
        if not lib:
            return []
        order, inside = [], False
        for line in lib.src.splitlines():
            if re.match(r"\s*//!\s*#+\s*Layout\b", line):
                inside = True
                continue
            if inside and re.match(r"\s*//!\s*#", line):
                break
            if inside:
                # A bullet naming a module, linked (`[`name`]`) or not (`name`).
                b = re.match(r"\s*//!\s*-\s*\[?`(" + IDENT + r")`\]?", line)
                if b and (b.group(1),) in self.mods:
                    order.append(b.group(1))
        return order


def name(path):
    return "::".join(path) if path else "crate"


def check(root):
    """The problems found in the crate at `root`, as lines to print."""
    crate = Crate(root)
    graph = defaultdict(set)
    evidence = defaultdict(list)
    for a, b, file, line in crate.edges():
        k = 0
        while k < min(len(a), len(b)) and a[k] == b[k]:
            k += 1
        if k == len(a) or k == len(b):
            continue  # a module and its own ancestor or descendant
        u, v = a[: k + 1], b[: k + 1]
        graph[u].add(v)
        evidence[(u, v)].append(f"{os.path.relpath(file, os.path.dirname(os.path.abspath(root)))}:{line}")
    problems = []
    for cycle in cycles(graph):
        hops = " -> ".join(name(c) for c in cycle + [cycle[0]])
        problems.append(f"{crate.name}: import loop: {hops}")
        for u, v in zip(cycle, cycle[1:] + cycle[:1]):
            problems.append(f"    {name(u)} -> {name(v)}: {', '.join(sorted(set(evidence[(u, v)])))}")
    order = crate.layers()
    for (u, v), where in sorted(evidence.items()):
        if len(u) == 1 and u[0] in order and v[0] in order and order.index(v[0]) > order.index(u[0]):
            problems.append(
                f"{crate.name}: {name(u)} imports {name(v)}, a layer listed after it in src/lib.rs's layout: "
                + ", ".join(sorted(set(where)))
            )
    return problems


def cycles(graph):
    """One shortest cycle through each edge that lies on a cycle, each cycle
    once: every loop is named, without listing every path around a big one."""
    nodes = sorted(set(graph) | {v for vs in graph.values() for v in vs})
    index, low, stack, on, sccs, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            sccs.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    found, seen = [], set()
    for comp in sccs:
        if len(comp) < 2:
            continue
        for u in sorted(comp):
            for v in sorted(w for w in graph[u] if w in comp):
                # Shortest path v -> u inside the component.
                prev, queue = {v: None}, [v]
                while queue and u not in prev:
                    nxt = []
                    for x in queue:
                        for y in sorted(graph.get(x, ())):
                            if y in comp and y not in prev:
                                prev[y] = x
                                nxt.append(y)
                    queue = nxt
                path, x = [], u
                while x is not None:
                    path.append(x)
                    x = prev[x]
                cycle = [u] + list(reversed(path))[:-1]
                start = cycle.index(min(cycle))
                key = tuple(cycle[start:] + cycle[:start])
                if key not in seen:
                    seen.add(key)
                    found.append(list(key))
    return found


# ---------------------------------------------------------------- self-test

FIXTURE = {
    "src/lib.rs": """//! A fixture.
//!
//! # Layout
//!
//! - [`low`]: at the bottom.
//! - [`high`]: above it.
mod high;
pub mod low;
pub use low::Thing;
""",
    "src/low/mod.rs": """mod a;
mod b;
pub use self::a::Thing;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod stand_in;
""",
    "src/low/a.rs": """use super::b::{self, Helper};
/// Not `super::b` only: see [`crate::low::b::Helper`].
pub struct Thing(b::Helper);
#[cfg(test)]
mod tests {
    use crate::high::Top;
}
""",
    "src/low/b.rs": """//! Names nothing of the crate.
pub struct Helper;
// Not crate::low::a: a plain comment.
const NOT_A_PATH: &str = "crate::low::a";
""",
    "src/low/tests.rs": "use crate::high::Top;\n",
    "src/low/stand_in.rs": "use crate::high::Top;\n",
    "src/high.rs": """use crate::{low::Thing, Thing as Again};
pub struct Top(Thing, Again);
""",
}


def self_test():
    def run(files, extra):
        with tempfile.TemporaryDirectory() as tmp:
            crate = os.path.join(tmp, "fixture")
            for rel, text in {**files, **extra}.items():
                path = os.path.join(crate, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text)
            r = subprocess.run([sys.executable, __file__, crate], capture_output=True, text=True)
            return r.returncode, r.stdout + r.stderr

    failures = []
    code, out = run(FIXTURE, {})
    if code != 0:
        failures.append(f"the fixture without loops was refused:\n{out}")
    # A sibling loop, made through a grouped use and a `pub use` in the parent.
    loop = {"src/low/b.rs": "use crate::low::{Thing};\npub struct Helper;\n"}
    code, out = run(FIXTURE, loop)
    if code == 0 or "import loop: low::a -> low::b -> low::a" not in out:
        failures.append(f"a loop between low::a and low::b was not named:\n{out}")
    # A loop only through a doc comment's `super::` path.
    doc = {"src/low/b.rs": "/// Made for [`super::a::Thing`].\npub struct Helper;\n"}
    code, out = run(FIXTURE, doc)
    if code == 0 or "low::b -> low::a" not in out:
        failures.append(f"a loop through a doc link was not named:\n{out}")
    # An import up the layer list, through a path in code.
    up = {"src/low/b.rs": "pub struct Helper;\nfn f() { let _ = crate::high::Top; }\n"}
    code, out = run(FIXTURE, up)
    if code == 0 or "low imports high" not in out:
        failures.append(f"an import up the layers was not named:\n{out}")
    # The same, with the layout's bullets unlinked (`low`, a private module's way).
    plain = {"src/lib.rs": FIXTURE["src/lib.rs"].replace("[`low`]", "`low`").replace("[`high`]", "`high`")}
    code, out = run(FIXTURE, {**up, **plain})
    if code == 0 or "low imports high" not in out:
        failures.append(f"an import up an unlinked layer list was not named:\n{out}")
    for f in failures:
        print(f"check-imports self-test: FAILED: {f}", file=sys.stderr)
    if failures:
        return 1
    print("check-imports self-test: ok: loops and upward imports refused, a clean crate passes")
    return 0


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    problems = []
    for root in argv or ["cluster", "launch", "loadgen", "nodesim"]:
        if not os.path.isdir(os.path.join(root, "src")):
            print(f"check-imports: {root}/src is not a directory", file=sys.stderr)
            return 2
        found = check(root)
        problems += found
        for p in found:
            print(p, file=sys.stderr)
        if not found:
            print(f"check-imports: {os.path.basename(os.path.abspath(root))}: no import loops", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
