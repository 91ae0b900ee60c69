"""Stage 1, the matrix: matrix.yaml in, Variants out, in one forward pass (`load`).

`load.read` reads the YAML with its line numbers (`yamlsrc`) and checks the top level against the strict
schema (`schema`, worded by `validate`); `expand` crosses each entry's axes and merges templates, includes
and a `checks_file` (`checksfile`) into one checked body a variant, refusing hostile values (`guards`);
`resolve` turns each body alone into one frozen Variant: components from the catalog, compatibility rules
(`compat`), the training requirements (`requirements`) and the env policy by version (`envpolicy`). Each step
hands the next a finished value (Source, Expanded, Variant) and none calls back. Pure: nothing here touches
docker or the network.
"""
