import sys

from validators.cli import entry

sys.exit(entry())
