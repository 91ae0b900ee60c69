"""Instance profiles as data: what each GPU instance type has and the bandwidth published for it.

Every number names its source. Hardware figures (GPUs, EFA devices, aggregate EFA Gbps, GDR) are AWS's
published instance specifications as recorded in the project's FIELD-NOTES ("Instance profiles", Dec 2026).
Bandwidth references are nccl-tests all_reduce_perf results other people published, at the message size
and node count they were measured; `measured_on` says when a figure was measured on a sibling type with the
same network (same EFA device count and speed), which is why it is used for this one.
Edit here, not in code; validators/profiles.py reads this table.
"""

HARDWARE_SOURCE = (
    "AWS EC2 accelerated-computing instance specifications (FIELD-NOTES 'Instance profiles', Dec 2026)"
)
GDR_SOURCE = (
    "aws-ofi-nccl refuses to run on these types without GPUDirect RDMA: "
    "'GDR disabled on GDR-supported instance type ...' then 'aws-ofi-nccl initialization failed' "
    "(FIELD-NOTES)"
)

_ADT_README = (
    "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md (commit 7217859f), "
    "all_reduce_perf table"
)
_ADT_TOPO = (
    "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/slurm/topology-aware-nccl-tests/"
    "README.md (commit 7217859f), 16-node p5en.48xlarge example output"
)
_ML_ENG = "stas00/ml-engineering network benchmarks (4 x p6-b200.48xlarge all_reduce, per FIELD-NOTES)"

GIB = 1 << 30

# reference: {nodes, size (bytes), busbw (GB/s), source, measured_on}
PROFILES = {
    "p4d.24xlarge": {
        "gpus": 8,
        "gpu": "A100 40GB",
        "efa_devices": 4,
        "efa_gbps": 400,
        "gdr_required": True,
        "references": [
            {
                "nodes": 2,
                "size": 1 * GIB,
                "busbw": 76.8,
                "source": _ADT_README,
                "measured_on": "p4de.24xlarge",
            },
            {
                "nodes": 2,
                "size": 2 * GIB,
                "busbw": 78.3,
                "source": _ADT_README,
                "measured_on": "p4de.24xlarge",
            },
        ],
        "notes": "A DLC test comment quotes ~41 GB/s at 1 GiB for 2 x p4d; the measured table above is used.",
    },
    "p4de.24xlarge": {
        "gpus": 8,
        "gpu": "A100 80GB",
        "efa_devices": 4,
        "efa_gbps": 400,
        "gdr_required": True,
        "references": [
            {"nodes": 2, "size": 1 * GIB, "busbw": 76.8, "source": _ADT_README, "measured_on": None},
            {"nodes": 2, "size": 2 * GIB, "busbw": 78.3, "source": _ADT_README, "measured_on": None},
        ],
        "notes": "",
    },
    "p5.48xlarge": {
        "gpus": 8,
        "gpu": "H100 80GB",
        "efa_devices": 32,
        "efa_gbps": 3200,
        "gdr_required": True,
        "references": [
            {"nodes": 2, "size": 1 * GIB, "busbw": 437.0, "source": _ADT_README, "measured_on": None},
            {"nodes": 2, "size": 2 * GIB, "busbw": 444.0, "source": _ADT_README, "measured_on": None},
            {"nodes": 2, "size": 16 * GIB, "busbw": 487.0, "source": _ADT_README, "measured_on": None},
        ],
        "notes": "",
    },
    "p5e.48xlarge": {
        "gpus": 8,
        "gpu": "H200 141GB",
        "efa_devices": 32,
        "efa_gbps": 3200,
        "gdr_required": True,
        "references": [
            {
                "nodes": 2,
                "size": 1 * GIB,
                "busbw": 437.0,
                "source": _ADT_README,
                "measured_on": "p5.48xlarge",
            },
            {
                "nodes": 2,
                "size": 2 * GIB,
                "busbw": 444.0,
                "source": _ADT_README,
                "measured_on": "p5.48xlarge",
            },
            {
                "nodes": 2,
                "size": 16 * GIB,
                "busbw": 487.0,
                "source": _ADT_README,
                "measured_on": "p5.48xlarge",
            },
        ],
        "notes": "No figure published for p5e; p5's is used (same network: 32 EFA devices, 3200 Gbps).",
    },
    "p5en.48xlarge": {
        "gpus": 8,
        "gpu": "H200 141GB",
        "efa_devices": 16,
        "efa_gbps": 3200,
        "gdr_required": True,
        "references": [
            {"nodes": 16, "size": 16 * GIB, "busbw": 370.0, "source": _ADT_TOPO, "measured_on": None},
        ],
        "notes": "Only a 16-node figure is published; other node counts are derived from it (profiles.py).",
    },
    "p6-b200.48xlarge": {
        "gpus": 8,
        "gpu": "B200",
        "efa_devices": 8,
        "efa_gbps": 3200,
        "gdr_required": True,
        "references": [
            {"nodes": 4, "size": 16 * GIB, "busbw": 382.0, "source": _ML_ENG, "measured_on": None},
        ],
        "notes": "Only a 4-node figure is published; other node counts are derived from it (profiles.py).",
    },
}

# A run passes at 90% of the reference: the tolerance nccl-tests itself applies to NCCL_TESTS_MIN_BW.
FLOOR_FRACTION = 0.9
FLOOR_SOURCE = "the tolerance nccl-tests applies to NCCL_TESTS_MIN_BW (src/common.cu)"
