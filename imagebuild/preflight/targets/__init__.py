"""One module per pre-flight recipe target; imagebuild/preflight/recipes.py renders them by name."""
