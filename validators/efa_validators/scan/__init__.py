"""Step 1 of a log line, scan: bytes in, the lines the parser needs out.

`linescan` finds the needle lines in a buffer (`memsearch`), `parscan` splits a large file across workers,
`prefix` strips launcher and timestamp prefixes, `progress` shows a long parse on a terminal.
"""
