#!/usr/bin/env python3
"""Source sizes, so each file and function stays readable whole: no source
file over 800 lines before its tests (`#[cfg(test)]`), and no function over
100 lines outside tests (a crate's tests/ folder and tests.rs modules are
tests; vendor/ is openraft's own). A function's lines run from its `fn` to
its closing brace, counted with strings and comments taken out.

    scripts/check_sizes.py [DIR...]      the crates' sources (default: every crate)
    scripts/check_sizes.py --self-test   proof that a long function and a long file are refused
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_imports import matching, scan as code_of  # noqa: E402

MAX_FILE, MAX_FN = 800, 100
FN = re.compile(r'\bfn\s+(\w+)')
TESTS = re.compile(r'^[ \t]*#\[cfg\(test\)\][ \t]*$', re.M)


def body_start(code, i):
    """The offset of the `{` that opens the body of the fn whose name ends
    at `i`, or None for a declaration (`;` first, outside brackets)."""
    depth = 0
    for j in range(i, len(code)):
        c = code[j]
        if c in '([':
            depth += 1
        elif c in ')]':
            depth -= 1
        elif depth == 0 and c == '{':
            return j
        elif depth == 0 and c == ';':
            return None
    return None


def check(path):
    # Comments and strings blanked out (same offsets), as the import check reads code.
    code, _ = code_of(open(path, encoding='utf-8').read())
    problems = []
    tests = TESTS.search(code)
    end_of_code = tests.start() if tests else len(code)
    lines_before = code.count('\n', 0, end_of_code) + (0 if tests or code.endswith('\n') else 1)
    if lines_before > MAX_FILE:
        problems.append(f'{path}: {lines_before} lines before its tests (at most {MAX_FILE})')
    past = 0
    for m in FN.finditer(code, 0, end_of_code):
        # A fn inside one already measured counts as its enclosing fn's lines.
        if m.start() < past:
            continue
        brace = body_start(code, m.end())
        if brace is None:
            continue
        past = matching(code, brace)
        first = code.count('\n', 0, m.start())
        lines = code.count('\n', m.start(), past - 1) + 1
        if lines > MAX_FN:
            problems.append(f'{path}:{first + 1}: fn {m.group(1)} is {lines} lines (at most {MAX_FN})')
    return problems


CRATES = ['proto', 'build-stamp', 'cluster', 'launch', 'loadgen', 'nodesim', 'benches']


def scan(roots):
    problems = []
    for root in roots:
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d not in ('target', 'vendor', '.git', 'tests')]
            for f in files:
                if f.endswith('.rs') and f != 'tests.rs':
                    problems += check(os.path.join(dirpath, f))
    return sorted(problems)


def self_test():
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        body = ''.join(f'    let x{i} = "{{ not a brace }}"; // }}\n' for i in range(99))
        short = 'fn short() {\n' + body[: body.index('\n') + 1] * 98 + '}\n'
        long_fn = 'pub(crate) async fn long_one(\n    a: u8,\n) {\n' + body + '}\n'
        open(os.path.join(d, 'ok.rs'), 'w').write(short + '#[cfg(test)]\nmod tests {\n' + long_fn + '}\n')
        open(os.path.join(d, 'bad.rs'), 'w').write(long_fn)
        open(os.path.join(d, 'big.rs'), 'w').write('const A: u8 = 0;\n' * 801)
        found = scan([d])
        assert len(found) == 2, found
        assert 'bad.rs:1: fn long_one is 103 lines' in found[0], found
        assert 'big.rs: 801 lines before its tests' in found[1], found
    print('check_sizes: self-test passed (a 103-line function and an 801-line file refused, tests passed over)')


if sys.argv[1:] == ['--self-test']:
    self_test()
    sys.exit(0)
problems = scan(sys.argv[1:] or CRATES)
for p in problems:
    print(p)
if problems:
    print(f'{len(problems)} over the limits (a file {MAX_FILE} lines before its tests, a function {MAX_FN})')
    sys.exit(1)
print(f'check-sizes: ok: no file over {MAX_FILE} lines before its tests, no function over {MAX_FN} lines')
