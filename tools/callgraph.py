#!/usr/bin/env python3
"""File-level call graph of a directory of C files, and its cycles.

A function definition is a line `name(` at column 0 that follows its
return-type line (the house style). A file A calls file B when A's text
names, followed by `(`, a function defined in B and not in A. Comments and
string literals are ignored. Prints each file's callees, then the strongly
connected components with more than one file (the call cycles).

    tools/callgraph.py [DIR]        (default: broker)
"""
import os
import re
import sys

DEF = re.compile(r"^([A-Za-z_]\w*)\(", re.M)
CALL = re.compile(r"\b([A-Za-z_]\w*)\s*\(")
STRIP = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                   re.S)


def strip(text):
    return STRIP.sub(lambda m: "\n" * m.group(0).count("\n"), text)


def load(d):
    files = {}
    for n in sorted(os.listdir(d)):
        if n.endswith(".c"):
            with open(os.path.join(d, n), encoding="utf-8") as f:
                files[n] = strip(f.read())
    return files


def graph(files):
    defined = {}  # function -> file (first definition wins)
    own = {}
    for n, text in files.items():
        own[n] = set(DEF.findall(text))
        for fn in own[n]:
            defined.setdefault(fn, n)
    edges = {n: set() for n in files}
    for n, text in files.items():
        for fn in CALL.findall(text):
            if fn in own[n]:
                continue
            other = defined.get(fn)
            if other is not None and other != n:
                edges[n].add(other)
    return edges


def sccs(edges):
    """Tarjan's algorithm."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "broker"
    edges = graph(load(d))
    print("calls:")
    for n in sorted(edges):
        print("  %-12s -> %s" % (n, " ".join(sorted(edges[n])) or "-"))
    cyc = [c for c in sccs(edges) if len(c) > 1]
    print("cycles (strongly connected components of more than one file):")
    for c in sorted(cyc, key=lambda c: (-len(c), c)):
        print("  " + " <-> ".join(c))
    if not cyc:
        print("  none")
    pairs = sorted((a, b) for a in edges for b in edges[a]
                   if a < b and a in edges[b])
    print("mutual pairs:")
    for a, b in pairs:
        print("  %s <-> %s" % (a, b))
    if not pairs:
        print("  none")


if __name__ == "__main__":
    main()
