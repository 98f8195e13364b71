#!/usr/bin/env python3
"""Per-crate module-file import graph + Tarjan SCCs (size > 1).

usage: cycles.py CRATES_DIR [--bare] [--all-edges]
Edges A -> B come from `use` trees and in-code paths starting with crate::,
super:: or self:: (also $crate::), resolved to the deepest existing module file.
--bare additionally resolves paths whose first segment is a child module declared
(`mod x;`) in the current module (2018-edition relative paths).
Ignored: edges to the crate root, to an ancestor module, self-edges, code in
`#[cfg(test)] mod x {}` blocks, files named tests.rs / under tests/.
Inline (non-test) `mod x { }` blocks are honoured for super::/self:: resolution.
Requires long_functions.py (same directory) for the lexer/masking.
"""
import glob, os, re, sys
from collections import defaultdict
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from long_functions import load, match_brace  # noqa: E402

SEG = r'(?:[A-Za-z_]\w*)'


def module_of(rel):                      # rel: path relative to src, '/'-separated
    parts = rel[:-3].split('/')
    if parts in (['lib'], ['main']): return ()
    if parts[-1] == 'mod': parts = parts[:-1]
    return tuple(parts)


def parse_use_tree(text):
    """Expand a use tree into a list of segment lists."""
    toks = re.findall(r'::|[{},*]|[A-Za-z_$][\w$]*', text)
    pos = 0

    def tree(prefix):
        nonlocal pos
        path = list(prefix)
        res = []
        while pos < len(toks):
            t = toks[pos]
            if t == '::': pos += 1; continue
            if t == '{':
                pos += 1
                while pos < len(toks) and toks[pos] != '}':
                    if toks[pos] == ',': pos += 1; continue
                    res.extend(tree(path))
                pos += 1
                return res
            if t in (',', '}'): break
            if t == '*': pos += 1; res.append(path); return res
            if t == 'as': pos += 2; break
            path.append(t); pos += 1
        res.append(path)
        return res
    out = []
    while pos < len(toks):
        if toks[pos] == ',': pos += 1; continue
        before = pos
        out.extend(tree([]))
        if pos == before: pos += 1
    return out


USE = re.compile(r'\buse\s+(?!<)')
INLINE_PATH = re.compile(r'(?<![\w:])\$?((?:crate|super|self)(?:\s*::\s*' + SEG + r')+)')
BARE_PATH = re.compile(r'(?<![\w:#\'])(' + SEG + r'(?:\s*::\s*' + SEG + r')+)')
INLINE_MOD = re.compile(r'\bmod\s+(' + SEG + r')\s*\{')
MOD_DECL = re.compile(r'\bmod\s+(' + SEG + r')\s*;')


def main():
    args = sys.argv[1:]
    bare = '--bare' in args
    show_all = '--all-edges' in args
    pos_args = [a for a in args if not a.startswith('--')]
    crates_dir = pos_args[0] if pos_args else 'crates'
    any_scc = False
    for crate in sorted(os.listdir(crates_dir)):
        src_dir = os.path.join(crates_dir, crate, 'src')
        if not os.path.isdir(src_dir): continue
        files = {}
        for f in sorted(glob.glob(os.path.join(src_dir, '**', '*.rs'), recursive=True)):
            rel = os.path.relpath(f, src_dir).replace(os.sep, '/')
            if os.path.basename(f) == 'tests.rs' or 'tests' in rel.split('/')[:-1]: continue
            files[rel] = f
        mods = {module_of(r): r for r in files}
        children = defaultdict(set)
        for mp in mods:
            if mp: children[mp[:-1]].add(mp[-1])

        def resolve(segs):
            for k in range(len(segs), 0, -1):
                if tuple(segs[:k]) in mods: return tuple(segs[:k])
            return ()

        edges = defaultdict(lambda: defaultdict(set))   # A -> B -> {path}
        for rel, f in files.items():
            src, m = load(f)
            me = module_of(rel)
            inl = []                                      # inline mod spans
            for im in INLINE_MOD.finditer(m):
                o = im.end() - 1
                inl.append((o, match_brace(m, o), im.group(1)))

            def ctx(idx):
                path = list(me)
                for o, c, name in inl:
                    if o < idx < c: path.append(name)
                return path

            def absolute(segs, idx):
                here = ctx(idx)
                if segs[0] in ('crate', '$crate'): return segs[1:]
                if segs[0] in ('self', 'super'):
                    base = list(here)
                    k = 0
                    while k < len(segs) and segs[k] in ('self', 'super'):
                        if segs[k] == 'super': base = base[:-1]
                        k += 1
                    return base + segs[k:]
                if bare and segs[0] in children.get(tuple(here), ()) \
                        and tuple(here + [segs[0]]) in mods:
                    return here + segs
                return None

            def add(segs, idx, text):
                if len(segs) > 1 and segs[-1] == 'self': segs = segs[:-1]   # a::{self}
                a = absolute(segs, idx) if segs else None
                if a is None: return
                tgt = resolve(a)
                if not tgt or tgt == me or me[:len(tgt)] == tgt: return
                edges[rel][mods[tgt]].add(text)

            used = list(m)
            for um in USE.finditer(m):
                end = m.find(';', um.end())
                if end < 0: continue
                body = m[um.end():end]
                for segs in parse_use_tree(body):
                    add(segs, um.start(), '::'.join(segs))
                for k in range(um.start(), end + 1):
                    if used[k] != '\n': used[k] = ' '
            rest = ''.join(used)
            for pm in (BARE_PATH if bare else INLINE_PATH).finditer(rest):
                segs = re.split(r'\s*::\s*', pm.group(1))
                if rest[max(0, pm.start() - 1)] == '$' and segs[0] == 'crate': segs[0] = '$crate'
                add(segs, pm.start(), '::'.join(segs))

        # Tarjan
        nodes = sorted(files)
        index, low, on, stack, sccs = {}, {}, set(), [], []
        counter = [0]
        sys.setrecursionlimit(10000)

        def strong(v):
            index[v] = low[v] = counter[0]; counter[0] += 1
            stack.append(v); on.add(v)
            for w in sorted(edges[v]):
                if w not in index:
                    strong(w); low[v] = min(low[v], low[w])
                elif w in on:
                    low[v] = min(low[v], index[w])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop(); on.discard(w); comp.append(w)
                    if w == v: break
                if len(comp) > 1: sccs.append(sorted(comp))
        for v in nodes:
            if v not in index: strong(v)
        if show_all:
            for a in sorted(edges):
                for b in sorted(edges[a]):
                    print(f'  edge {crate}: {a} -> {b}: {", ".join(sorted(edges[a][b]))}')
        for comp in sorted(sccs):
            any_scc = True
            cs = set(comp)
            print(f'{crate}: SCC of {len(comp)} files: {", ".join(comp)}')
            for a in comp:
                for b in sorted(edges[a]):
                    if b in cs:
                        print(f'    {a} -> {b}: {", ".join(sorted(edges[a][b]))}')
    if not any_scc:
        print('no cycles')


if __name__ == '__main__':
    main()
