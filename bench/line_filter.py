#!/usr/bin/env python3
"""The baseline issue 33 names: a small Python line filter that parses nothing.

It reads each file line by line, as a hand-written pre-flight filter would, and counts the lines that
match PATTERN (the bench gives it the parser's own needles, the pattern grep gets): the lines the parse has
to find. The parse then reads and judges them; at or above this filter's speed, a team loses nothing by
running the parse instead of its own filter.

    python bench/line_filter.py PATTERN FILE...
"""

import re
import sys


def main(pattern: str, paths: list) -> int:
    search = re.compile(pattern).search
    count = 0
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if search(line):
                    count += 1
    print(count)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
