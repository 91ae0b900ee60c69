"""Stage 4, check: images in, the static check report out.

`expectations` derives the checks as data from the lock in the image's label (generic ones, and each
component block's); `runner.check_image` starts a container of the image and runs the pytest module
`test_image.py` against it (testinfra, docker backend); `probes` are the evaluators, `inventory.py` the small
stdlib probe copied into the container, and `report` owns build/test-report.json and its JUnit twin.
"""
