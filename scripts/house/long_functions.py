#!/usr/bin/env python3
"""List long Rust fns in product code.

usage: long_functions.py CRATES_DIR [THRESHOLD=120]
Scans CRATES_DIR/*/src/**/*.rs, skipping files named tests.rs or under a tests/
directory, and `#[cfg(test)] mod NAME { ... }` blocks. Body length = lines from the
opening `{` line to the closing `}` line, inclusive. Output: `lines path:line fn_name`.
"""
import bisect, glob, os, re, sys

IDENT = re.compile(r'[A-Za-z0-9_]')


def mask(src):
    """Blank out comments, string/char literals (keeping newlines) so that the
    remaining text only contains code tokens, at the same offsets."""
    out = list(src)
    n = len(src)

    def blank(a, b):
        for k in range(a, min(b, n)):
            if out[k] != '\n':
                out[k] = ' '

    def ident_before(k):
        return k > 0 and IDENT.match(src[k - 1]) is not None

    i = 0
    while i < n:
        c = src[i]
        nx = src[i + 1] if i + 1 < n else ''
        if c == '/' and nx == '/':
            j = src.find('\n', i)
            j = n if j < 0 else j
            blank(i, j); i = j
        elif c == '/' and nx == '*':          # nested block comments
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            blank(i, j); i = j
        elif c in 'rb' and not ident_before(i):
            k = i
            if src[k] == 'b': k += 1
            if k < n and src[k] == 'r':
                k += 1; h = 0
                while k < n and src[k] == '#': h += 1; k += 1
                if k < n and src[k] == '"':     # raw string r"..", r#".."#, br".."
                    close = '"' + '#' * h
                    e = src.find(close, k + 1)
                    e = n if e < 0 else e + len(close)
                    blank(i, e); i = e
                    continue
            i += 1
        elif c == '"':
            j = i + 1
            while j < n:
                if src[j] == '\\': j += 2
                elif src[j] == '"': j += 1; break
                else: j += 1
            blank(i, j); i = j
        elif c == "'":
            if nx == '\\':                       # '\n', '\'', '\u{..}'
                e = src.find("'", i + 3)
                e = n if e < 0 else e + 1
                blank(i, e); i = e
            elif i + 2 < n and src[i + 2] == "'" and nx != '\n':   # 'x'
                blank(i, i + 3); i += 3
            else:                                # lifetime / label  'a
                i += 1
        else:
            i += 1
    return ''.join(out)


def match_brace(m, open_idx):
    depth = 0
    for k in range(open_idx, len(m)):
        ch = m[k]
        if ch == '{': depth += 1
        elif ch == '}':
            depth -= 1
            if depth == 0: return k
    return len(m) - 1


CFG_TEST = re.compile(r'#\s*\[\s*cfg\s*\(\s*test\s*\)\s*\]')
AFTER_ATTR = re.compile(r'\s*(?:#\s*\[[^\]]*\]\s*)*(?:pub(?:\s*\([^)]*\))?\s+)?mod\s+\w+\s*([{;])')


def strip_test_mods(m):
    """Blank `#[cfg(test)] mod x { ... }` blocks in masked text."""
    out = m
    for a in list(CFG_TEST.finditer(m)):
        t = AFTER_ATTR.match(m, a.end())
        if t and t.group(1) == '{':
            close = match_brace(m, t.end(1) - 1)
            seg = out[a.start():close + 1]
            out = out[:a.start()] + re.sub(r'[^\n]', ' ', seg) + out[close + 1:]
    return out


def product_files(crates_dir):
    for f in sorted(glob.glob(os.path.join(crates_dir, '*', 'src', '**', '*.rs'), recursive=True)):
        rel = os.path.relpath(f, crates_dir).split(os.sep)
        parts_under_src = rel[2:]
        if os.path.basename(f) == 'tests.rs' or 'tests' in parts_under_src[:-1]:
            continue
        yield f


def load(f):
    with open(f, encoding='utf-8') as fh:
        src = fh.read()
    return src, strip_test_mods(mask(src))


FN = re.compile(r'\bfn\s+(?:r#)?([A-Za-z_]\w*)')


def functions(m):
    """Yield (name, fn_idx, open_idx, close_idx) for fns with a body."""
    for fm in FN.finditer(m):
        pd = bd = 0
        k = fm.end()
        while k < len(m):
            ch = m[k]
            if ch == '(': pd += 1
            elif ch == ')': pd -= 1
            elif ch == '[': bd += 1
            elif ch == ']': bd -= 1
            elif pd == 0 and bd == 0 and ch in '{;': break
            k += 1
        if k < len(m) and m[k] == '{':
            yield fm.group(1), fm.start(), k, match_brace(m, k)


def main():
    args = sys.argv[1:]
    crates_dir = 'crates'
    thr = 120
    for a in args:
        if a.isdigit(): thr = int(a)
        else: crates_dir = a
    base = os.path.dirname(os.path.abspath(crates_dir))
    rows = []
    for f in product_files(crates_dir):
        src, m = load(f)
        nl = [i for i, ch in enumerate(m) if ch == '\n']
        line = lambda idx: bisect.bisect_left(nl, idx) + 1
        for name, fi, o, c in functions(m):
            ln = line(c) - line(o) + 1
            if ln > thr:
                rows.append((ln, os.path.relpath(f, base), line(fi), name))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    for ln, p, l, name in rows:
        print(f'{ln} {p}:{l} {name}')


if __name__ == '__main__':
    main()
