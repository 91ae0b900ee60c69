"""Stage 1, the matrix: matrix.yaml in, Variants out.

`load` reads the YAML with its line numbers (`yamlsrc`), refuses hostile input (`guards`), validates it
against the strict schema (`schema`), expands templates and axes, and `resolve` turns each combination into
one frozen Variant: components from the catalog, compatibility rules (`compat`), the training requirements
(`requirements`) and the env policy by version (`envpolicy`). Pure: nothing here touches docker or the
network.
"""
