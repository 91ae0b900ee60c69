"""Stage 2, render: Variants in, build folders out.

`dockerfile` renders one Variant's Dockerfile from Dockerfile.templates/ (each component block its partial);
`folders` assembles build/<variant>/ (Dockerfile, lock, context with the validators and the training code,
the context manifest) in memory and writes only the folders that changed.
"""
