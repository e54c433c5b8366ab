#!/usr/bin/env bash
# Checks BENCHMARKS.md's headline table, so that a figure a user reads there
# can be traced and taken again:
#   - the file is at most 500 lines (the history lives in docs/bench-log/);
#   - every row has a date (YYYY-MM-DD) and a commit that exists in git;
#   - every row's command is one a user can type: a `loadgen`, `cluster` or
#     `nodesim` named in it must know the subcommand and every --flag given
#     (checked against the binary's own --help), and a `scripts/X.sh` must
#     exist;
#   - every row's section link points at a heading of the file.
# It prints every failure, naming the row, and exits 1 if there was one.
#
#   scripts/check-benchmarks.sh [FILE]        # FILE: BENCHMARKS.md by default
#   scripts/check-benchmarks.sh --self-test   # prove that each failure above is caught
#
# The binaries come from STAMPEDE_BIN (default: ${CARGO_TARGET_DIR:-target}/debug):
#   cargo build --bin cluster --bin loadgen --bin nodesim
# Needs a git checkout (the commits are looked up) and python3.
set -euo pipefail

file=BENCHMARKS.md
self_test=0
for arg in "$@"; do
  case "$arg" in
    --self-test) self_test=1 ;;
    -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check-benchmarks: unknown option $arg (--self-test, --help)" >&2; exit 2 ;;
    *) file=$(realpath "$arg") ;;
  esac
done
script=$(realpath "$0")
cd "$(dirname "$0")/.."
export STAMPEDE_BIN="${STAMPEDE_BIN:-${CARGO_TARGET_DIR:-target}/debug}"

if ((self_test)); then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  head=$(git rev-parse --short HEAD)
  # A table every check accepts, one row per kind of command.
  good() {
    cat <<EOF
# Benchmarks

## Headline figures

| figure | value | date | commit | command that reproduces it | section |
| --- | --- | --- | --- | --- | --- |
| writes row | 1 | 2026-11-26 | \`$head\` | \`target/release/loadgen writes --servers \$ADDRS --writers 64 --duration=10s\` | [Raft writes](#raft-writes-against-etcd-11) |
| cluster row | 2 | 2026-11-26 | \`$head\` | \`target/release/cluster dev --servers 3 --insecure -- --threads 2\` | [c2m](#c2m-mini) |
| nodesim row | 3 | 2026-11-26 | \`$head\` | \`STAMPEDE_X=1 target/release/nodesim --nodes 10 --servers a:1\` | [c2m](#c2m-mini-1) |
| script row | 4 | 2026-11-26 | \`$head\` | \`scripts/compare-etcd.sh --runs 3 && cargo bench -p stampede-benches\` | [Raft writes](#raft-writes-against-etcd-11) |

## Raft writes: against etcd (1:1)

## \`c2m-mini\`

## c2m-mini
EOF
  }
  good >"$tmp/good.md"
  if ! bash "$script" "$tmp/good.md" >"$tmp/out" 2>&1; then
    cat "$tmp/out" >&2
    echo "check-benchmarks self-test: FAILED: a good table was refused" >&2
    exit 1
  fi
  # Each case: a row that must be refused, and a word the failure must say.
  cases=(
    "no date|| \`$head\` | \`scripts/run.sh\` | [c2m](#c2m-mini)|date"
    "no commit|2026-11-26 | | \`scripts/run.sh\` | [c2m](#c2m-mini)|commit"
    "unknown commit|2026-11-26 | \`0000000000000000000000000000000000000000\` | \`scripts/run.sh\` | [c2m](#c2m-mini)|commit"
    "unknown subcommand|2026-11-26 | \`$head\` | \`target/release/loadgen compare --servers x\` | [c2m](#c2m-mini)|compare"
    "unknown flag|2026-11-26 | \`$head\` | \`target/release/loadgen capacity --scenario c2m-mini --no-such-flag\` | [c2m](#c2m-mini)|--no-such-flag"
    "unknown nodesim flag|2026-11-26 | \`$head\` | \`target/release/nodesim --nodes 10 --bogus 1\` | [c2m](#c2m-mini)|--bogus"
    "missing script|2026-11-26 | \`$head\` | \`scripts/no-such-script.sh --out x\` | [c2m](#c2m-mini)|no-such-script"
    "dangling link|2026-11-26 | \`$head\` | \`scripts/run.sh\` | [nowhere](#no-such-heading)|no-such-heading"
  )
  for c in "${cases[@]}"; do
    IFS='|' read -r name date commit command section want <<<"$c"
    good | sed "/^| script row /a | $name | 9 | $date | $commit | $command | $section |" >"$tmp/bad.md"
    if bash "$script" "$tmp/bad.md" >"$tmp/out" 2>&1; then
      cat "$tmp/out" >&2
      echo "check-benchmarks self-test: FAILED: the row '$name' was accepted" >&2
      exit 1
    fi
    if ! grep -F "'$name'" "$tmp/out" | grep -qF -- "$want"; then
      cat "$tmp/out" >&2
      echo "check-benchmarks self-test: FAILED: the failure does not name the row '$name' and '$want'" >&2
      exit 1
    fi
  done
  { good; printf '\n%.0s' {1..500}; } >"$tmp/long.md"
  if bash "$script" "$tmp/long.md" >"$tmp/out" 2>&1 || ! grep -q '500 lines' "$tmp/out"; then
    cat "$tmp/out" >&2
    echo "check-benchmarks self-test: FAILED: a file over 500 lines was accepted" >&2
    exit 1
  fi
  echo "check-benchmarks self-test: ok: a good table passes; each of $((${#cases[@]} + 1)) faults is refused by name"
  exit 0
fi

git rev-parse --git-dir >/dev/null 2>&1 || { echo "check-benchmarks: not a git checkout: commits cannot be checked" >&2; exit 1; }

python3 - "$file" <<'EOF'
"""The headline table's checks; see the header of scripts/check-benchmarks.sh."""
import os
import re
import shlex
import subprocess
import sys

MAX_LINES = 500
BINARIES = {"loadgen", "cluster", "nodesim"}
path = sys.argv[1]
bindir = os.environ["STAMPEDE_BIN"]
errors = []
text = open(path, encoding="utf-8").read()
lines = text.splitlines()
name = os.path.basename(path)

if len(lines) > MAX_LINES:
    errors.append(f"{name} is {len(lines)} lines, over {MAX_LINES} lines: move history to docs/bench-log/")


def anchors():
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, repeats numbered."""
    seen, out, fence = {}, set(), False
    for line in lines:
        if line.startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def cells(line):
    """A table row's cells, split on pipes outside code spans."""
    out, cur, code = [], "", False
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    i = 0
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "|"
            i += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
        i += 1
    out.append(cur.strip())
    return out


help_cache = {}


def help_of(binary, sub):
    """(subcommands, flags) from `binary [sub] --help`, or an error string."""
    key = (binary, sub)
    if key not in help_cache:
        exe = os.path.join(bindir, binary)
        if not os.access(exe, os.X_OK):
            help_cache[key] = f"{exe} not found (cargo build --bin {binary}, or set STAMPEDE_BIN)"
        else:
            args = [exe] + ([sub] if sub else []) + ["--help"]
            r = subprocess.run(args, capture_output=True, text=True)
            if r.returncode != 0:
                help_cache[key] = f"`{' '.join(args[1:])}` failed: {r.stderr.strip()[:200]}"
            else:
                subs, flags, in_cmds = set(), set(), False
                for h in r.stdout.splitlines():
                    if h.strip() == "Commands:":
                        in_cmds = True
                        continue
                    if in_cmds:
                        m = re.match(r"^\s+([\w-]+)\s", h + " ")
                        if m:
                            subs.add(m.group(1))
                            continue
                        in_cmds = False
                    m = re.match(r"^\s+(?:(-\w), )?(--[\w-]+)", h)
                    if m:
                        flags.update(f for f in m.groups() if f)
                    # A flag's older names, still taken (clap's visible
                    # aliases, on the flag's line or below it).
                    for a in re.findall(r"\[alias(?:es)?: ([^\]]*)\]", h):
                        flags.update(re.findall(r"--[\w-]+", a))
                    m = re.match(r"^\s+(-\w)\s", h)
                    if m:
                        flags.add(m.group(1))
                help_cache[key] = (subs, flags)
    return help_cache[key]


def check_command(row, cmd):
    try:
        lex = shlex.shlex(cmd, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True
        tokens = list(lex)
    except ValueError as e:
        errors.append(f"row '{row}': command `{cmd}` does not parse: {e}")
        return
    segments, cur = [], []
    for t in tokens:
        if t in (";", "&&", "||", "|", "&"):
            segments.append(cur)
            cur = []
        else:
            cur.append(t)
    segments.append(cur)
    for t in tokens:
        if re.fullmatch(r"(\./)?scripts/[\w.-]+\.sh", t) and not os.path.isfile(t):
            errors.append(f"row '{row}': {t} does not exist")
    for seg in segments:
        while seg and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", seg[0]):
            seg = seg[1:]
        if not seg or os.path.basename(seg[0]) not in BINARIES:
            continue
        binary, args = os.path.basename(seg[0]), seg[1:]
        if "--" in args:
            args = args[: args.index("--")]  # passed on to another program
        top = help_of(binary, None)
        if isinstance(top, str):
            errors.append(f"row '{row}': {top}")
            continue
        sub = None
        if top[0] and not (args and args[0].startswith("-")):
            if not args:
                errors.append(f"row '{row}': `{binary}` without a subcommand ({', '.join(sorted(top[0] - {'help'}))})")
                continue
            sub, args = args[0], args[1:]
            if sub not in top[0]:
                errors.append(f"row '{row}': `{binary} {sub}`: {binary} has no subcommand {sub} ({', '.join(sorted(top[0] - {'help'}))})")
                continue
        known = help_of(binary, sub)
        if isinstance(known, str):
            errors.append(f"row '{row}': {known}")
            continue
        shown = f"{binary} {sub}" if sub else binary
        for a in args:
            if re.match(r"^--?[A-Za-z]", a):
                flag = a.split("=", 1)[0]
                if flag not in known[1]:
                    errors.append(f"row '{row}': `{shown}` has no flag {flag} (its --help lists {', '.join(sorted(known[1]))})")


# The headline table: the first table whose header names these columns.
start = None
for i, line in enumerate(lines):
    if line.startswith("|"):
        head = [c.lower() for c in cells(line)]
        if head[:4] == ["figure", "value", "date", "commit"] and len(head) >= 6:
            start = i
            break
if start is None:
    errors.append(f"{name} has no headline table (| figure | value | date | commit | command ... | section |)")
else:
    head = [c.lower() for c in cells(lines[start])]
    col = {
        "date": head.index("date"),
        "commit": head.index("commit"),
        "command": next(i for i, h in enumerate(head) if h.startswith("command")),
        "section": next(i for i, h in enumerate(head) if h.startswith("section")),
    }
    ids = anchors()
    rows = 0
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        c = cells(line)
        rows += 1
        row = c[0] or f"row {rows}"
        if len(c) != len(head):
            errors.append(f"row '{row}': {len(c)} cells, the header has {len(head)}")
            continue
        date = c[col["date"]]
        if not date:
            errors.append(f"row '{row}': the date is empty")
        elif not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
            errors.append(f"row '{row}': the date '{date}' is not YYYY-MM-DD")
        commit = c[col["commit"]].strip("`").strip()
        if not commit:
            errors.append(f"row '{row}': the commit is empty")
        elif not re.fullmatch(r"[0-9a-f]{7,40}", commit):
            errors.append(f"row '{row}': the commit '{commit}' is not a commit id")
        elif subprocess.run(["git", "cat-file", "-e", commit + "^{commit}"], capture_output=True).returncode != 0:
            errors.append(f"row '{row}': the commit {commit} is not in git")
        commands = re.findall(r"`([^`]+)`", c[col["command"]])
        if not commands:
            errors.append(f"row '{row}': no command (in backticks)")
        for cmd in commands:
            check_command(row, cmd)
        links = re.findall(r"\]\(#([^)]*)\)", c[col["section"]])
        if not links:
            errors.append(f"row '{row}': no section link [..](#heading)")
        for link in links:
            if link not in ids:
                errors.append(f"row '{row}': the section link #{link} is no heading in {name}")
    if rows == 0:
        errors.append(f"{name}: the headline table has no rows")

for e in errors:
    print(f"check-benchmarks: {e}", file=sys.stderr)
if errors:
    sys.exit(1)
print(f"check-benchmarks: ok: {name}, {len(lines)} lines, the headline table's {rows} rows")
EOF
