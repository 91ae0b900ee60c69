"""Pre-flight validation of EFA/NCCL from NCCL_DEBUG=INFO and nccl-tests output.

Standard library only, Python 3.8+: this package is copied into every image the tool builds, so the code
CI tests is the code that runs on the cluster.
"""

__version__ = "0.1.0"
