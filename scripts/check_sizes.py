#!/usr/bin/env python3
"""Source sizes, so each file and function stays readable whole: no source
file over 800 lines before its tests (`#[cfg(test)]`), and no function over
100 lines outside tests (a crate's tests/ folder and tests.rs modules are
tests; vendor/ is openraft's own). A function's lines run from its `fn` to
its closing brace, counted with strings and comments taken out.

    scripts/check_sizes.py [DIR...]      the crates' sources (default: every crate)
    scripts/check_sizes.py --self-test   proof that a long function and a long file are refused
"""
import os, re, sys

MAX_FILE, MAX_FN = 800, 100
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?((const|async|unsafe|extern "C")\s+)*fn\s+(\w+)')

def strip(line, state):
    """The line without strings, chars and comments; state carries a block comment."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state['block']:
            j = line.find('*/', i)
            if j < 0:
                return ''.join(out)
            state['block'] = False; i = j + 2; continue
        c = line[i]
        if line.startswith('//', i):
            break
        if line.startswith('/*', i):
            state['block'] = True; i += 2; continue
        if c == '"':
            j = i + 1
            while j < n and line[j] != '"':
                j += 2 if line[j] == '\\' else 1
            i = j + 1; continue
        if c == "'" and re.match(r"'(\\.|[^\\'])'", line[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", line[i:]).group(0)); continue
        out.append(c); i += 1
    return ''.join(out)

def check(path):
    lines = open(path, encoding='utf-8').read().splitlines()
    problems = []
    test_at = next((i for i, l in enumerate(lines) if l.strip() == '#[cfg(test)]'), len(lines))
    if test_at > MAX_FILE:
        problems.append(f'{path}: {test_at} lines before its tests (at most {MAX_FILE})')
    state = {'block': False}
    i = 0
    while i < test_at:
        m = FN.match(lines[i])
        if not m or lines[i].rstrip().endswith(';'):
            strip(lines[i], state); i += 1; continue
        depth, opened, j = 0, False, i
        while j < len(lines):
            code = strip(lines[j], state)
            if not opened and ';' in code and '{' not in code:
                break
            depth += code.count('{') - code.count('}')
            opened = opened or '{' in code
            if opened and depth <= 0:
                break
            j += 1
        if opened and j - i + 1 > MAX_FN:
            problems.append(f'{path}:{i+1}: fn {m.group(5)} is {j-i+1} lines (at most {MAX_FN})')
        i = j + 1 if opened else i + 1
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
