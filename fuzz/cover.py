#!/usr/bin/env python3
"""Greedy edge cover of a libFuzzer merge control file.

usage: cover.py CONTROL_FILE KEEP_DIR [MAX_FILES]  (see fuzz/minimize.sh)
Keeps the hand-written seeds (names that are not 40 hex digits), then adds
the inputs that cover the most edges not yet covered until every edge any
input covers is covered, or MAX_FILES are kept; deletes the other inputs
from KEEP_DIR."""
import os, re, sys
ctl, keep_dir = sys.argv[1], sys.argv[2]
max_files = int(sys.argv[3]) if len(sys.argv) > 3 else 10**9
lines = open(ctl).read().split('\n')
n = int(lines[0]); files = lines[2:2 + n]
cov = {}
for line in lines[2 + n:]:
    parts = line.split()
    if parts and parts[0] == 'COV':
        cov[int(parts[1])] = set(parts[2:])
seed = lambda p: not re.fullmatch(r'[0-9a-f]{40}', os.path.basename(p))
covered = set(); chosen = set()
for i, p in enumerate(files):
    if seed(p):
        chosen.add(i); covered |= cov.get(i, set())
allcov = set().union(*cov.values()) if cov else set()
while covered != allcov and len(chosen) < max_files:
    best = max((i for i in cov if i not in chosen),
               key=lambda i: (len(cov[i] - covered), -os.path.getsize(files[i])))
    if not cov[best] - covered: break
    chosen.add(best); covered |= cov[best]
for i, p in enumerate(files):
    if i not in chosen and os.path.dirname(os.path.abspath(p)) == os.path.abspath(keep_dir):
        os.remove(p)
print(f'{len(files)} inputs, {len(allcov)} edges; kept {len(chosen)} covering {len(covered)} edges ({sum(1 for i in chosen if seed(files[i]))} seeds)')
