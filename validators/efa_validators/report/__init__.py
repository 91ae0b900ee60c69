"""Step 4, report: a verdict in, the report out.

`contract` holds what every reader agrees on (schema id, exit codes, the replay mark), `assemble` builds the
JSON report, `formats` renders it as JUnit and Markdown, `jsonout` streams JSON, `outfile` writes a file
whole or not at all.
"""
