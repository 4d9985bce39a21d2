#!/usr/bin/env python3
"""Every log id the code can write is documented, and every documented id is
still written somewhere.

usage: check_log_ids.py SRCDIR

A log id is the first "X123" string literal of a tlb_log / tli_log / tlg_log
call. Ids of the broker (everything outside broker/msc4140) must appear as a
table row "| `X123` |" in docs/timelined.md; ids of the MSC4140 gateway
(broker/msc4140) in docs/msc4140.md; ids of tl-chronos (broker/chronos) in docs/chronos.md. Exits 1 and names each missing or stale id.
"""
import os, re, sys

src = sys.argv[1] if len(sys.argv) > 1 else '.'
call = re.compile(r'\b(?:tlb_log|tli_log|tlg_log|TLG_LOG|TLB_LOG)\s*\(([^;]{0,200}?)"([A-Z][0-9]{3})"', re.S)
found = {}  # id -> (doc, first place)
for top in ('base', 'proto', 'storage', 'broker', 'sdk', 'http'):
    for dirpath, _, names in os.walk(os.path.join(src, top)):
        for n in names:
            if not n.endswith(('.c', '.h')):
                continue
            p = os.path.join(dirpath, n)
            text = open(p, errors='replace').read()
            rel = os.path.relpath(p, src)
            doc = ('docs/msc4140.md' if rel.startswith('broker/msc4140') else
                   'docs/chronos.md' if rel.startswith('broker/chronos') else
                   'docs/timelined.md')
            for m in call.finditer(text):
                line = text.count('\n', 0, m.start()) + 1
                found.setdefault((doc, m.group(2)), f'{rel}:{line}')
bad = 0
documented = {}
for doc in ('docs/timelined.md', 'docs/msc4140.md', 'docs/chronos.md'):
    text = open(os.path.join(src, doc)).read()
    documented[doc] = set(re.findall(r'^\|\s*`([A-Z][0-9]{3})`\s*\|', text, re.M))
for (doc, lid), where in sorted(found.items()):
    if lid not in documented[doc]:
        print(f'{where}: log id {lid} is not documented in {doc}')
        bad += 1
for doc, ids in documented.items():
    used = {lid for (d, lid) in found if d == doc}
    for lid in sorted(ids - used):
        print(f'{doc}: log id {lid} is documented but never logged')
        bad += 1
print(f'{len(found)} log ids in the code, {bad} problems')
sys.exit(1 if bad else 0)
