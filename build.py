#!/usr/bin/env python3
"""Entry point: render, build, test, push and release the images of a build matrix.

Run `python build.py --help`. Exit codes: 0 ok, 1 checks failed, 2 bad input or usage.
"""

import sys

from imagebuild.cli import entry

if __name__ == "__main__":
    sys.exit(entry())
