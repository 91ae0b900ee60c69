"""Step 2, parse: lines in, facts out.

`nccllog` turns NCCL_DEBUG lines into events, `nccltests` reads nccl-tests tables, and `facts` folds the
events into per-process and per-rank facts (memory grows with ranks and channels, never with lines).
"""
