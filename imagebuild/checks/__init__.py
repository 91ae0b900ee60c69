"""Static checks of a built image: testinfra (docker backend) in a container of the image.

`runner.check_image` starts the container and runs the pytest module `test_image.py` against it; the checks
come from `imagebuild.expectations` (derived from the lock in the image's label), the evaluators from
`probes`, and `inventory.py` is the small stdlib probe copied into the container.
"""
