#!/usr/bin/env python3
"""Writes the first ```cpp block after a heading of a Markdown page to a file, unindented, so
that a test compiles the code a page shows rather than a copy of it.

    extract_block.py PAGE.md 'HEADING TEXT' OUT
"""
import sys
import textwrap


def main() -> int:
    page, heading, out = sys.argv[1:4]
    lines = open(page, encoding='utf-8').read().split('\n')
    start = next((i for i, l in enumerate(lines) if l.startswith('#') and heading in l), None)
    if start is None:
        print(f'extract_block: {page} has no heading holding {heading!r}', file=sys.stderr)
        return 1
    begin = next((i for i in range(start, len(lines)) if lines[i].strip() == '```cpp'), None)
    end = next((i for i in range(begin + 1, len(lines)) if lines[i].strip() == '```'), None) if begin else None
    if begin is None or end is None:
        print(f'extract_block: no closed ```cpp block under {heading!r} in {page}', file=sys.stderr)
        return 1
    code = textwrap.dedent('\n'.join(lines[begin + 1:end]))
    with open(out, 'w', encoding='utf-8') as f:
        f.write(f'// written by tests/docs/extract_block.py from {page}, under "{heading}"\n{code}\n')
    return 0


if __name__ == '__main__':
    sys.exit(main())
