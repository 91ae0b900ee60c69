"""Beside the parse path, node: one node's static facts (devices, libraries, the image's lock) checked
before a job starts (`nodecheck`, `python -m efa_validators node-check`).
"""
