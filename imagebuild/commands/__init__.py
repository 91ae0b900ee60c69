"""One module per build.py verb; see imagebuild/cli.py."""
