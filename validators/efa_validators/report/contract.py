"""What every report and every caller agree on: the report's schema id, the exit code of each verdict, and
the replay stand-in's mark.

Exit codes (a contract CI pipelines rely on): 0 pass, 1 fail, 2 bad input or usage, 3 unknown. The mark is
the stand-in's first line (efa_validators.replay prints it): `validators run` and `validators parse` look
for it,
so a report made from a recording says REPLAY. It holds none of the parser's other needles
(efa_validators.analyze).
"""

SCHEMA = "efa-image-build/report/v1"  # parse's and run's reports alike

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_UNKNOWN = 0, 1, 2, 3
EXIT_BY_VERDICT = {"pass": EXIT_PASS, "fail": EXIT_FAIL, "unknown": EXIT_UNKNOWN}

REPLAY_MARK = "efa_validators.replay: REPLAY"
# what a report made from a recording says next to its verdict, before anything else (stdout, Markdown)
REPLAY_NOTE = "REPLAY of a recorded log: no evidence about this cluster"
