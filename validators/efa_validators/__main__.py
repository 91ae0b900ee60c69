import sys

from efa_validators.cli import entry

sys.exit(entry())
