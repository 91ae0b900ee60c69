"""Instance profiles as data: what each GPU instance type has and the bandwidth published for it.

The one source of instance profiles: efa_validators/judge/profiles.py reads it for the verdict, and the host
side (imagebuild.catalog.instances(), for the matrix's instance_types, the env policy and cuda_arch) reads the
same table, so the two can never disagree. Standard library only: it ships in every image.

Every figure names its source, a file in a public repository (repo, path, commit) or a public page:
`sources` per profile says where GPUs, EFA device count, EFA Gbps and gdr_required come from. A figure no
such source gives is None (unknown), never a guess: an unknown EFA device count makes the `nics` check
unknown, not a pass. Bandwidth references are all_reduce busbw figures other people published (nccl-tests
all_reduce_perf, or for p6-b200 a torch.distributed benchmark that computes busbw the nccl-tests way),
at the message size and node count they were measured; `measured_on` says when a figure was measured on a
sibling type with the same network, which is why it is used for this one.
Edit here, not in code.
"""

_ADT = "aws-samples/awsome-distributed-training"
_ADT_COUNTS = (
    _ADT + " 4.validation_and_observability/2.gpu-cluster-healthcheck/instance-profiles.conf "
    "(commit 7217859f): GPU and EFA device counts"
)
_OFI_PLATFORM = (
    "aws/aws-ofi-nccl src/platform-aws.cpp (commit 2daf7d30) platform table, gdr_required: the plugin "
    "fails with 'GDR disabled on GDR-supported instance type' where it is true"
)
_OFI_NO_GDR = (
    "aws/aws-ofi-nccl src/platform-aws.cpp (commit 2daf7d30): gdr_required false (or no platform entry), "
    "the plugin runs EFA without GPUDirect RDMA there by design"
)
_SPECS = (
    "tsaol/aws-gpu data/{}_instances.js (commit 77fcd9f; instances.vantage.sh data): GPU model and count "
    "(gpuCount), network Gbps (network)"
)

_GB200_EFA_UNKNOWN = (
    "unknown, no public source read states it: awsome-distributed-training instance-profiles.conf and "
    "1.architectures/efa-cheatsheet.md (commit 7217859f), tsaol/aws-gpu (77fcd9f), stas00/ml-engineering "
    "network/README.md (744d01e), aws/aws-ofi-nccl src/platform-aws.cpp (2daf7d30), AWS EC2 user guide "
    "efa-acc-inst-types. The plugin also drops NICs with no GPU at their PCI level on p6e-gb200 "
    "(platform-aws.cpp sets SKIP_NICS_WITHOUT_ACCEL_AT_SAME_PCI_LEVEL), so a count it logs need not be the "
    "instance's"
)
HARDWARE_SOURCE = "per profile: see `sources` (GPU/EFA counts, EFA Gbps, gdr_required)"
GDR_SOURCE = _OFI_PLATFORM

_ADT_README = (
    "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/README.md (commit 7217859f), "
    "all_reduce_perf table"
)
_ADT_TOPO = (
    "aws-samples/awsome-distributed-training micro-benchmarks/nccl-tests/slurm/topology-aware-nccl-tests/"
    "README.md (commit 7217859f), 16-node p5en.48xlarge example output"
)
_ML_ENG = (
    "stas00/ml-engineering network/README.md (commit 744d01e), table under 'Inter-node speed depends "
    "on intra-node speed', 4 x p6-b200.48xlarge: 381.80 GB/s at 16 GiB. Measured with torch.distributed "
    "all_reduce (network/benchmarks/all_reduce_bench.py; torch 2.9.1, NCCL 2.27.7), not all_reduce_perf: "
    "busbw as nccl-tests defines it, GB/s = 1e9 B/s"
)

GIB = 1 << 30

# nvlink: whether the instance type's GPUs are joined by NVLink (True), have none (False), or no source read
# says (None). node-check's gpu-nvlink check reads it: empty `nvidia-smi nvlink -s` output is a pass where it
# is False, a fail where it is True, unknown where it is None. None: p3dn (no source read gives its
# interconnect) and p5.4xlarge (one GPU: no source says what `nvidia-smi nvlink` lists without a peer).
_NVLINK_SPECS = (
    "tsaol/aws-gpu data/{}_instances.js (commit 77fcd9f; instances.vantage.sh data): gpuInterconnect '{}'"
)
_NVLINK_B300 = (
    "tsaol/aws-gpu gpu.md (commit 77fcd9f), p6-b300.48xlarge section: features 'NVLink 5' "
    "(data/p6-b300_instances.js gives no gpuInterconnect)"
)
_NVLINK_G5 = (
    "gist.github.com/shashankprasanna/10ebe6dc1ba1d8d93db17da4e2cc890e (AWS GPU instance table, column 'GPU "
    "Interconnect (NVLink / PCIe)'): the A10G of G5's multi-GPU sizes (g5.12xlarge, g5.24xlarge) 'PCIe', "
    "p4d's A100 'NVLink gen 3'"
)
_NVLINK_L40S = (
    "www.itcreations.com/nvidia-gpu/nvidia-l40s-gpu-accelerator (L40S PCIe card spec page): 'NVLink is not "
    "supported', interconnect interface 'PCIe Gen4 x16: 64GB/s bidirectional'; the same interconnect row, "
    "PCIe only, in the L40/L40S spec table of www.mullet.se/product.html?product_id=355414"
)


def _sources(gpus, efa_devices, efa_gbps, gdr_required, nvlink=None):
    """Where each hardware figure of a profile comes from (None: the figure is unknown)."""
    return {
        "gpus": gpus,
        "efa_devices": efa_devices,
        "efa_gbps": efa_gbps,
        "gdr_required": gdr_required,
        "nvlink": nvlink,
    }


def _adt_sources(family, interconnect):
    """The sources of a profile whose GPU and EFA counts awsome-distributed-training's instance profiles list:
    its specs row for the EFA Gbps and NVLink, the plugin's platform table for gdr_required."""
    return _sources(
        _ADT_COUNTS,
        _ADT_COUNTS,
        _SPECS.format(family),
        _OFI_PLATFORM,
        _NVLINK_SPECS.format(family, interconnect),
    )


def _references(source, measured_on, *figures):
    """Busbw references from one source, (nodes, size in bytes, busbw in GB/s) each; `measured_on` the
    sibling type they were measured on (None: this one)."""
    return [
        {"nodes": nodes, "size": size, "busbw": busbw, "source": source, "measured_on": measured_on}
        for nodes, size, busbw in figures
    ]


# reference: {nodes, size (bytes), busbw (GB/s), source, measured_on}. p4de's and p5's figures serve their
# siblings of the same network too (measured_on says so)
_P4DE_FIGURES = ((2, 1 * GIB, 76.8), (2, 2 * GIB, 78.3))
_P5_FIGURES = ((2, 1 * GIB, 437.0), (2, 2 * GIB, 444.0), (2, 16 * GIB, 487.0))
PROFILES = {
    "p4d.24xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": "80",
        "sources": _adt_sources("p4d", "600 GB/s NVSwitch"),
        "gpus": 8,
        "gpu": "A100 40GB",
        "efa_devices": 4,
        "efa_gbps": 400,
        "gdr_required": True,
        "nvlink": True,
        "references": _references(_ADT_README, "p4de.24xlarge", *_P4DE_FIGURES),
        "notes": "A DLC test comment quotes ~41 GB/s at 1 GiB for 2 x p4d; the measured table above is used.",
    },
    "p4de.24xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": "80",
        "sources": _adt_sources("p4de", "600 GB/s NVSwitch"),
        "gpus": 8,
        "gpu": "A100 80GB",
        "efa_devices": 4,
        "efa_gbps": 400,
        "gdr_required": True,
        "nvlink": True,
        "references": _references(_ADT_README, None, *_P4DE_FIGURES),
        "notes": "",
    },
    "p5.48xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": "90",
        "sources": _adt_sources("p5", "900 GB/s NVSwitch"),
        "gpus": 8,
        "gpu": "H100 80GB",
        "efa_devices": 32,
        "efa_gbps": 3200,
        "gdr_required": True,
        "nvlink": True,
        "references": _references(_ADT_README, None, *_P5_FIGURES),
        "notes": "",
    },
    "p5e.48xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": "90",
        "sources": _adt_sources("p5e", "900 GB/s NVSwitch"),
        "gpus": 8,
        "gpu": "H200 141GB",
        "efa_devices": 32,
        "efa_gbps": 3200,
        "gdr_required": True,
        "nvlink": True,
        "references": _references(_ADT_README, "p5.48xlarge", *_P5_FIGURES),
        "notes": "No figure published for p5e; p5's is used (same network: 32 EFA devices, 3200 Gbps).",
    },
    "p5en.48xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": "90",
        "sources": _adt_sources("p5en", "900 GB/s NVSwitch"),
        "gpus": 8,
        "gpu": "H200 141GB",
        "efa_devices": 16,
        "efa_gbps": 3200,
        "gdr_required": True,
        "nvlink": True,
        "references": _references(_ADT_TOPO, None, (16, 16 * GIB, 370.0)),
        "notes": "Only a 16-node figure is published; other node counts are derived from it (profiles.py).",
    },
    "p6-b200.48xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": "100",
        "sources": _adt_sources("p6-b200", "1800 GB/s NVLink"),
        "gpus": 8,
        "gpu": "B200",
        "efa_devices": 8,
        "efa_gbps": 3200,
        "gdr_required": True,
        "nvlink": True,
        "references": _references(_ML_ENG, None, (4, 16 * GIB, 381.8)),
        "notes": "Only a 4-node figure is published; other node counts are derived from it (profiles.py).",
    },
    "p3dn.24xlarge": {
        "arch": "x86_64",
        "rdma_read": False,
        "cuda_arch": "70",
        "sources": _sources(_SPECS.format("p3dn"), None, _SPECS.format("p3dn"), _OFI_NO_GDR),
        "gpus": 8,
        "gpu": "V100 32GB",
        "efa_devices": None,
        "efa_gbps": 100,
        "gdr_required": False,
        "nvlink": None,
        "references": [],
        "notes": "EFA without GPUDirect RDMA (no RDMA read on its EFA device).",
    },
    "g5.48xlarge": {
        "arch": "x86_64",
        "rdma_read": False,
        "cuda_arch": "86",
        "sources": _sources(_SPECS.format("g5"), None, _SPECS.format("g5"), _OFI_NO_GDR, _NVLINK_G5),
        "gpus": 8,
        "gpu": "A10G 24GB",
        "efa_devices": None,
        "efa_gbps": 100,
        "gdr_required": False,
        "nvlink": False,
        "references": [],
        "notes": "EFA without GPUDirect RDMA by design (aws-ofi-nccl platform entry, gdr_required false).",
    },
    "g6e.48xlarge": {
        "arch": "x86_64",
        "rdma_read": False,
        "cuda_arch": "89",
        "sources": _sources(_SPECS.format("g6e"), None, _SPECS.format("g6e"), _OFI_NO_GDR, _NVLINK_L40S),
        "gpus": 8,
        "gpu": "L40S 48GB",
        "efa_devices": None,
        "efa_gbps": 400,
        "gdr_required": False,
        "nvlink": False,
        "references": [],
        "notes": "EFA without GPUDirect RDMA (no gdr_required platform entry in aws-ofi-nccl); rdma_read "
        "false keeps FI_EFA_USE_DEVICE_RDMA unset.",
    },
    "p5.4xlarge": {
        "arch": "x86_64",
        "rdma_read": None,
        "cuda_arch": "90",
        "sources": _sources(_SPECS.format("p5"), None, _SPECS.format("p5"), _OFI_NO_GDR),
        "gpus": 1,
        "gpu": "H100 80GB",
        "efa_devices": None,
        "efa_gbps": 100,
        "gdr_required": False,
        "nvlink": None,
        "references": [],
        "notes": "One GPU: EFA without GPUDirect RDMA by design (aws-ofi-nccl 'p5.4xlarge' entry, "
        "gdr_required false), so GDR off is no failure there.",
    },
    "p6-b300.48xlarge": {
        "arch": "x86_64",
        "rdma_read": True,
        "cuda_arch": None,
        "sources": _sources(
            _SPECS.format("p6-b300"), None, _SPECS.format("p6-b300"), _OFI_PLATFORM, _NVLINK_B300
        ),
        "gpus": 8,
        "gpu": "B300",
        "efa_devices": None,
        "efa_gbps": 6400,
        "gdr_required": True,
        "nvlink": True,
        "references": [],
        "notes": "No published nccl-tests figure yet: bandwidth is not judged (unknown).",
    },
    "p6e-gb200.36xlarge": {
        "arch": "arm64",
        "rdma_read": True,
        "cuda_arch": "100",
        "sources": _sources(
            _SPECS.format("p6e-gb200") + " (p6e-gb200.36xlarge: gpuCount 4)",
            _GB200_EFA_UNKNOWN,
            _SPECS.format("p6e-gb200") + " ('1600 Gbps EFAv4'; data/u-p6e-gb200x72_instances.js agrees: "
            "28800 Gbps over its 18 instances)",
            _OFI_PLATFORM + " ('p-series' entry; include/platform-aws.h PLATFORM_NAME_P6E_GB200)",
            _NVLINK_SPECS.format("p6e-gb200", "1800 GB/s NVLink"),
        ),
        "gpus": 4,
        "gpu": "B200 (GB200 superchip)",
        "efa_devices": None,
        "efa_gbps": 1600,
        "gdr_required": True,
        "nvlink": True,
        "references": [],
        "notes": "Grace (arm64) host with 4 GPUs; no published nccl-tests figure yet: bandwidth not judged. "
        "EFA Gbps disagrees between sources: 1600 (tsaol/aws-gpu) against 3200 (stas00/ml-engineering "
        "network/README.md, commit 744d01e, quoting AWS's network specifications page).",
    },
}

# A run passes at 90% of the reference: the tolerance nccl-tests itself applies to NCCL_TESTS_MIN_BW.
FLOOR_FRACTION = 0.9
FLOOR_SOURCE = "the tolerance nccl-tests applies to NCCL_TESTS_MIN_BW (src/common.cu)"
