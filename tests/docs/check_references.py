#!/usr/bin/env python3
"""Every reference the docs and the sources make resolves.

- Every Note cited in docs/, README.md, src/, apps/, examples/, tests/, bench/ and scripts/
  is defined somewhere: a comment line that holds the word Note and the bracketed name alone.
- Every repository path cited in docs/, README.md and src/ (a word that starts with src/, docs/,
  tests/, apps/, examples/, bench/, scripts/ or cmake/) names a file or folder of the repository.

Prints each reference that does not resolve with where it is cited; exit 1 if there is any.
  check_references.py REPO_ROOT
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "."
TEXT = (".md", ".hpp", ".cpp", ".cu", ".cuh", ".inc", ".h", ".py", ".sh", ".build", ".txt", ".js", ".mjs", ".cmake")
SKIP_DIRS = {".git", "node_modules", "__pycache__"}


def files(top):
    base = os.path.join(root, top)
    if os.path.isfile(base):
        yield top
        return
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
        for f in filenames:
            if f.endswith(TEXT) or f == "meson.build":
                yield os.path.relpath(os.path.join(dirpath, f), root)


def read(path):
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as fh:
        return fh.read()


NOTE_DEF = re.compile(r"^\s*(?://|#|\*)\s*Note \[([^\]]+)\]\s*$", re.M)
NOTE_REF = re.compile(r"Note \[([^\]]+)\]")
PATH = re.compile(r"(?<![\w./-])((?:src|docs|tests|apps|examples|bench|scripts|cmake)/[\w./-]*[\w/])")

cited_in = ["docs", "README.md", "src", "apps", "examples", "tests", "bench", "scripts"]
defined = set()
all_files = sorted({f for top in cited_in + ["meson.build"] for f in files(top)} - {"tests/docs/check_references.py"})
for f in all_files:
    defined.update(NOTE_DEF.findall(read(f)))

problems = []
for f in all_files:
    text = read(f)
    for n, line in enumerate(text.splitlines(), 1):
        for name in NOTE_REF.findall(line):
            if name not in defined:
                problems.append(f"{f}:{n}: Note [{name}] is defined nowhere")
        if f.startswith(("docs/", "src/")) or f == "README.md":
            for path in PATH.findall(line):
                if "*" in path or "<" in path or "/NN." in path:  # a pattern, or configs/NN.json's placeholder
                    continue
                candidate = os.path.join(root, path.rstrip("/."))
                # a program is cited by its build path's name: bench/cuda_bench is bench/cuda_bench.cpp's
                if not any(os.path.exists(candidate + ext) for ext in ("", ".cpp", ".cu")):
                    problems.append(f"{f}:{n}: {path} is not a file or folder of the repository")

for p in problems:
    print(p)
print(f"check_references: {len(all_files)} files, {len(defined)} Notes defined, {len(problems)} references that do not resolve")
sys.exit(1 if problems else 0)
