#!/usr/bin/env bash
# Checks the Markdown against the checkout, so no link or command drifts:
#  1. every relative link in every *.md (outside vendor/, docs/bench-log/
#     and target directories) points at a file or folder that exists, and a
#     #anchor into a .md file at one of its headings (GitHub's slugs);
#  2. in the guides (README.md; the README.md of cluster/, loadgen/,
#     nodesim/, dashboards/ and deploy/; docs/security.md), every command
#     line of a sh/bash/console block, and every inline `code` span, that
#     runs one of our binaries (cluster, loadgen, nodesim, with or without a
#     path) uses real subcommands and only --flags the binary's --help
#     lists; every scripts/X.sh named exists, and a flag given to it appears
#     in it (or, for scripts/run.sh, in `loadgen capacity --help`, which it
#     runs).
#
#   scripts/check-docs.sh              # check this checkout
#   scripts/check-docs.sh --self-test  # first prove it catches a dangling
#                                      # link, a bad anchor, an unknown
#                                      # subcommand, an unknown flag and a
#                                      # missing script
#
# STAMPEDE_BIN=DIR: the built binaries (default ${CARGO_TARGET_DIR:-target}/debug:
# cargo build --bin cluster --bin loadgen --bin nodesim). Exits 1 naming
# file:line and what is wrong.
set -euo pipefail
cd "$(dirname "$0")/.."
export STAMPEDE_BIN="${STAMPEDE_BIN:-${CARGO_TARGET_DIR:-target}/debug}"

exec python3 - "$@" <<'PY'
import os
import re
import subprocess
import sys
import tempfile
import urllib.parse

GUIDES = [
    "README.md",
    "cluster/README.md",
    "loadgen/README.md",
    "nodesim/README.md",
    "docs/security.md",
    "dashboards/README.md",
    "deploy/README.md",
]
BINARIES = {"cluster", "loadgen", "nodesim"}
# Scripts that hand their arguments to one of our binaries.
FORWARDS = {"scripts/run.sh": ("loadgen", ["capacity"])}
SHELL_LANGS = {"sh", "bash", "shell", "console", "shell-session"}
SKIP_DIRS = {"vendor", "node_modules", "runs"}
SKIP_PATHS = {os.path.join("docs", "bench-log")}
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
SCRIPT_NAME = re.compile(r"(?<![\w/.-])scripts/[\w.-]+\.(?:sh|py)\b")
FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9-]*")
SUBCOMMAND = re.compile(r"^[a-z][a-z0-9-]*$")


def markdown_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(
            d for d in dirnames
            if not d.startswith(".") and d not in SKIP_DIRS and not d.startswith("target")
            and os.path.normpath(os.path.join(rel, d)) not in SKIP_PATHS
        )
        for f in sorted(filenames):
            if f.endswith(".md"):
                yield os.path.normpath(os.path.join(rel, f))


class Doc:
    """A Markdown file: its prose lines (numbered), code blocks and headings."""

    def __init__(self, path):
        self.prose = []   # (line number, text)
        self.blocks = []  # (language, [(line number, text)])
        self.headings = []
        fence = None
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f.read().split("\n"), 1):
                m = FENCE.match(line)
                if fence is None and m:
                    fence = m.group(1)
                    self.blocks.append((m.group(2).lower(), []))
                    continue
                if fence is not None:
                    if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2):
                        fence = None
                    else:
                        self.blocks[-1][1].append((n, line))
                    continue
                self.prose.append((n, line))
                h = HEADING.match(line)
                if h:
                    self.headings.append(h.group(2))

    def anchors(self):
        seen, out = {}, set()
        for text in self.headings:
            slug = slugify(text)
            k = seen.get(slug, 0)
            seen[slug] = k + 1
            out.add(slug if k == 0 else f"{slug}-{k}")
        return out


def slugify(text):
    """GitHub's heading anchor: the rendered text, lower-cased, punctuation
    but - dropped, spaces made -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def check_links(root, docs):
    errors = []
    for rel, doc in docs.items():
        here = os.path.dirname(rel)
        for n, line in doc.prose:
            plain = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
            targets = [m.group(1) for m in LINK.finditer(plain)]
            d = REFDEF.match(plain)
            if d:
                targets.append(d.group(1))
            for url in targets:
                if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", url) or url.startswith("//"):
                    continue
                path, _, anchor = url.partition("#")
                path = urllib.parse.unquote(path.split("?")[0])
                if path:
                    target = os.path.normpath(
                        path.lstrip("/") if path.startswith("/") else os.path.join(here, path))
                else:
                    target = rel
                full = os.path.join(root, target)
                if target.startswith("..") or not os.path.exists(full):
                    errors.append(f"{rel}:{n}: link to {url}: {target} does not exist")
                    continue
                if anchor and target.endswith(".md") and os.path.isfile(full):
                    if target not in docs:
                        docs[target] = Doc(full)
                    if anchor.lower() not in docs[target].anchors():
                        errors.append(f"{rel}:{n}: link to {url}: {target} has no heading #{anchor}")
    return errors


def split_commands(text):
    """The simple commands of a shell line: lists of words, with quotes
    removed, comments dropped, and each $(...) or `...` a command of its own."""
    commands, words, word, nested = [], [], None, []
    skip_next = False
    i, quote = 0, None

    def end_word():
        nonlocal word, skip_next
        if word is not None:
            if skip_next:
                skip_next = False
            else:
                words.append(word)
        word = None

    def end_command():
        nonlocal words
        end_word()
        if words:
            commands.append(words)
        words = []

    while i < len(text):
        c = text[i]
        if quote == "'":
            if c == "'":
                quote = None
            else:
                word += c
            i += 1
            continue
        if c == "\\" and i + 1 < len(text):
            word = (word or "") + text[i + 1]
            i += 2
            continue
        if (c == "$" and text[i + 1:i + 2] == "(") or c == "`":
            close, depth, j = (")", 1, i + 2) if c == "$" else ("`", 1, i + 1)
            start = j
            while j < len(text) and depth:
                if close == ")" and text[j] == "(":
                    depth += 1
                elif text[j] == close:
                    depth -= 1
                j += 1
            nested.append(text[start:j - 1])
            word = (word or "") + "$X"
            i = j
            continue
        if quote == '"':
            if c == '"':
                quote = None
            else:
                word += c
            i += 1
            continue
        if c in "'\"":
            quote = c
            word = word or ""
        elif c.isspace():
            end_word()
        elif c == "#" and word is None:
            break
        elif c in "|&;()":
            end_command()
        elif c in "<>":
            end_word()
            while i + 1 < len(text) and text[i + 1] in "<>&":
                i += 1
            skip_next = True
        else:
            word = (word or "") + c
        i += 1
    end_command()
    for inner in nested:
        commands += split_commands(inner)
    return commands


class Helps:
    def __init__(self, bin_dir):
        self.bin_dir = bin_dir
        self.cache = {}
        self.missing = set()

    def get(self, exe, sub):
        key = (exe, tuple(sub))
        if key not in self.cache:
            path = os.path.join(self.bin_dir, exe)
            if not os.access(path, os.X_OK):
                # Said once, at the first command that needs it.
                first = exe not in self.missing
                self.missing.add(exe)
                return (None, f"{exe} is not in STAMPEDE_BIN={self.bin_dir} "
                              "(cargo build --bin cluster --bin loadgen --bin nodesim)" if first else "")
            else:
                out = subprocess.run([path] + sub + ["--help"], capture_output=True, text=True)
                if out.returncode == 0:
                    self.cache[key] = (out.stdout, None)
                else:
                    self.cache[key] = (None, f"`{' '.join([exe] + sub)} --help` failed: {out.stderr.strip()}")
        return self.cache[key]


def subcommands(help_text):
    m = re.search(r"^Commands:\n((?:  .*\n)+)", help_text, re.M)
    return {l.split()[0] for l in m.group(1).splitlines() if l.strip()} if m else set()


def has_flag(help_text, flag):
    return re.search(re.escape(flag) + r"(?![A-Za-z0-9-])", help_text) is not None


def check_binary(exe, args, helps, where, inline):
    """Errors of one invocation of our binary: subcommands, then flags."""
    errors, sub, i = [], [], 0
    text, err = helps.get(exe, sub)
    if text is None:
        return [f"{where}: {err}"] if err else []
    while True:
        cmds = subcommands(text)
        if not cmds or i >= len(args) or args[i].startswith("-"):
            break
        word = args[i]
        if not SUBCOMMAND.match(word):
            if inline:  # a placeholder such as `cluster job ...`
                return errors
            errors.append(f"{where}: `{' '.join([exe] + sub)}` needs a subcommand ({', '.join(sorted(cmds))}), not {word}")
            return errors
        if word not in cmds:
            errors.append(f"{where}: `{' '.join([exe] + sub)}` has no subcommand {word} ({', '.join(sorted(cmds))})")
            return errors
        sub.append(word)
        i += 1
        text, err = helps.get(exe, sub)
        if text is None:
            return errors + ([f"{where}: {err}"] if err else [])
    rest = args[i:]
    if "--" in rest:
        k = rest.index("--")
        rest, passed = rest[:k], rest[k + 1:]
        if exe == "cluster" and sub == ["dev"]:  # flags for every `cluster serve`
            errors += check_binary("cluster", ["serve"] + passed, helps, where, inline)
    for a in rest:
        m = FLAG.match(a.lstrip("["))
        if m and not has_flag(text, m.group(0)):
            errors.append(f"{where}: `{' '.join([exe] + sub)}` has no flag {m.group(0)}")
    return errors


def check_script(root, name, args, helps, where, inline):
    path = os.path.join(root, name)
    if not os.path.isfile(path):
        return [f"{where}: {name} does not exist"]
    if name in FORWARDS:
        exe, sub = FORWARDS[name]
        return check_binary(exe, sub + args, helps, where, inline)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    errors = []
    for a in args:
        m = FLAG.match(a.lstrip("["))
        if m and not has_flag(text, m.group(0)):
            errors.append(f"{where}: {name} takes no flag {m.group(0)}")
    return errors


def check_line(root, text, helps, where, inline=False):
    errors = []
    for words in split_commands(text):
        while words and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]) or words[0] in ("sudo", "exec", "time", "nohup", "env")):
            words = words[1:]
        if len(words) > 1 and words[0] in ("bash", "sh"):
            words = words[1:]
        if not words:
            continue
        if inline:
            words = [w.strip("[]") for w in words if w.strip("[]")]
        exe = words[0]
        if os.path.basename(exe) in BINARIES and "." not in os.path.basename(exe):
            errors += check_binary(os.path.basename(exe), words[1:], helps, where, inline)
        m = SCRIPT_NAME.search(exe)
        if m and exe.endswith(m.group(0)):
            errors += check_script(root, m.group(0), words[1:], helps, where, inline)
    return errors


def check_commands(root, docs, guides, helps):
    errors = []
    for rel in guides:
        if rel not in docs:
            errors.append(f"{rel}: the guide is missing")
            continue
        doc = docs[rel]
        for lang, lines in doc.blocks:
            if lang not in SHELL_LANGS:
                continue
            pending, start = "", None
            for n, line in lines:
                if lang in ("console", "shell-session"):
                    if not pending:
                        if not line.lstrip().startswith("$ "):
                            continue
                        line = line.lstrip()[2:]
                if not pending:
                    start = n
                if line.rstrip().endswith("\\"):
                    pending += line.rstrip()[:-1] + " "
                    continue
                errors += check_line(root, pending + line, helps, f"{rel}:{start}")
                pending = ""
        for n, line in doc.prose:
            for m in CODE_SPAN.finditer(line):
                errors += check_line(root, m.group(2), helps, f"{rel}:{n}", inline=True)
            for m in SCRIPT_NAME.finditer(line):
                if not os.path.isfile(os.path.join(root, m.group(0))):
                    errors.append(f"{rel}:{n}: {m.group(0)} does not exist")
        for _, lines in doc.blocks:
            for n, line in lines:
                for m in SCRIPT_NAME.finditer(line):
                    if not os.path.isfile(os.path.join(root, m.group(0))):
                        errors.append(f"{rel}:{n}: {m.group(0)} does not exist")
    return sorted(set(errors), key=errors.index)


def check(root, bin_dir, guides):
    docs = {rel: Doc(os.path.join(root, rel)) for rel in markdown_files(root)}
    return check_links(root, docs) + check_commands(root, docs, guides, Helps(bin_dir))


STUB = r"""#!/bin/sh
case "$*" in
  --help) printf 'Usage: loadgen <COMMAND>\n\nCommands:\n  capacity  A run\n  help      Print help\n\nOptions:\n  -h, --help  Print help\n' ;;
  "capacity --help") printf 'Usage: loadgen capacity [OPTIONS]\n\nOptions:\n      --scenario <SCENARIO>  A scenario\n  -h, --help  Print help\n' ;;
  *) echo "unexpected: $*" >&2; exit 2 ;;
esac
"""

BAD_DOC = """# Top

See [the other](other.md#a-heading), [top](#top), [a folder](sub/),
[gone](missing.md) and [nowhere](other.md#no-such-heading).

```sh
loadgen capacity --scenario default   # fine
bin/loadgen capacity \\
  --no-such-flag 3
loadgen nosuchcmd
scripts/missing.sh --out x
```

Inline, `loadgen capacity --scenario x` is fine and `loadgen capacity --bogus` is not.
"""


def self_test():
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "bin"))
        os.makedirs(os.path.join(tmp, "sub"))
        stub = os.path.join(tmp, "bin", "loadgen")
        with open(stub, "w") as f:
            f.write(STUB)
        os.chmod(stub, 0o755)
        with open(os.path.join(tmp, "README.md"), "w") as f:
            f.write(BAD_DOC)
        with open(os.path.join(tmp, "other.md"), "w") as f:
            f.write("# Other\n\n## A heading\n")
        errors = check(tmp, os.path.join(tmp, "bin"), ["README.md"])
    text = "\n".join(errors)
    want = {
        "README.md:4: link to missing.md": "a dangling link",
        "README.md:4: link to other.md#no-such-heading": "a link to a missing heading",
        "README.md:8: `loadgen capacity` has no flag --no-such-flag": "an unknown flag on a continued line",
        "README.md:10: `loadgen` has no subcommand nosuchcmd": "an unknown subcommand",
        "README.md:11: scripts/missing.sh does not exist": "a missing script",
        "README.md:14: `loadgen capacity` has no flag --bogus": "an unknown flag in inline code",
    }
    failed = [f"not caught: {what} ({needle})" for needle, what in want.items() if needle not in text]
    if len(errors) != len(want):
        failed.append(f"expected {len(want)} errors, got {len(errors)}")
    if failed:
        print(text, file=sys.stderr)
        for f in failed:
            print(f"check-docs self-test: FAILED: {f}", file=sys.stderr)
        sys.exit(1)
    print(f"check-docs self-test: ok: {len(want)} planted mistakes caught, nothing else reported")


def main(argv):
    if "--self-test" in argv:
        self_test()
    errors = check(".", os.environ["STAMPEDE_BIN"], GUIDES)
    for e in errors:
        print(f"check-docs: {e}", file=sys.stderr)
    if errors:
        print(f"check-docs: {len(errors)} problem(s)", file=sys.stderr)
        return 1
    print("check-docs: ok: every link resolves; every command in the guides uses real subcommands and flags")
    return 0


sys.exit(main(sys.argv[1:]))
PY
