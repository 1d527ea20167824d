#!/usr/bin/env python3
"""Checks every tracked .md file: each relative link (and #anchor) resolves inside the repository, no
link leaves it, nothing names the repository's parent (`shared/`), and each backticked path exists.
Run from the repository root: `python3 docs/check-links.py`; exit status 1 on any problem."""
import os, re, sys, subprocess
root = sys.argv[1] if len(sys.argv) > 1 else '.'
os.chdir(root)
files = subprocess.run(['git', 'ls-files', '*.md'], capture_output=True, text=True).stdout.split()
def slug(h):
    h = h.strip().lower()
    h = re.sub(r'[^\w\- ]', '', h)
    return h.replace(' ', '-')
anchors = {}
def get_anchors(path):
    if path not in anchors:
        s = set(); counts = {}
        in_code = False
        for line in open(path, encoding='utf-8'):
            if line.startswith('```'): in_code = not in_code
            if not in_code and re.match(r'#{1,6} ', line):
                a = slug(re.sub(r'^#+ ', '', line.rstrip('\n')))
                n = counts.get(a, 0); counts[a] = n + 1
                s.add(a if n == 0 else f'{a}-{n}')
        anchors[path] = s
    return anchors[path]
bad = 0
bases = ['', 'crates/', 'crates/locklab/', 'crates/locklab/src/', 'crates/locklab-bench/',
         'crates/locklab-bench/src/', 'crates/locklab-pthread/', 'crates/locklab-pthread/src/',
         'crates/locklab-sim/', 'crates/locklab-sim/src/', 'docs/']
for f in files:
    text = open(f, encoding='utf-8').read()
    if re.search(r'shared/|\.\./shared', text):
        for i, l in enumerate(text.splitlines(), 1):
            if re.search(r'(^|[^\w])shared/', l): print(f'{f}:{i}: mentions shared/: {l.strip()[:100]}'); bad += 1
    in_code = False
    for i, line in enumerate(text.splitlines(), 1):
        if line.startswith('```'): in_code = not in_code; continue
        if in_code: continue
        for m in re.finditer(r'\]\(([^)\s]+)\)', line):
            t = m.group(1)
            if re.match(r'[a-z]+:', t):
                print(f'{f}:{i}: external link {t}'); bad += 1; continue
            path, _, frag = t.partition('#')
            target = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if target.startswith('..') or os.path.isabs(target):
                print(f'{f}:{i}: link leaves the repository {t}'); bad += 1; continue
            if not os.path.exists(target):
                print(f'{f}:{i}: broken link {t}'); bad += 1; continue
            if frag and target.endswith('.md') and frag not in get_anchors(target):
                print(f'{f}:{i}: broken anchor {t}'); bad += 1
        for m in re.finditer(r'`([^`\s]+)`', line):
            t = m.group(1)
            if '/' not in t or '://' in t or t.startswith('-') or '=' in t or '{' in t: continue
            if not re.search(r'(\.(rs|toml|md|sh|c|cc|h|py|json|html|png)|/)$', t): continue
            p = t.rstrip('/')
            if p.startswith(('kernel/', 'target/')): continue  # the kernel's sources; build output
            p = re.sub(r'<[^>]+>', '*', p)
            if p.startswith('../'): p = os.path.normpath(os.path.join(os.path.dirname(f), p))
            if '*' in p:
                import glob
                ok = any(glob.glob(b + p) for b in bases)
            else:
                ok = any(os.path.exists(b + p) for b in bases) or os.path.exists(os.path.join(os.path.dirname(f), p))
            if not ok: print(f'{f}:{i}: path not found `{t}`'); bad += 1
print(f'{bad} problems in {len(files)} files'); sys.exit(1 if bad else 0)
