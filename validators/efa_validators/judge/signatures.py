"""The catalog of failure signatures: what each looks like in a log, and what to do.

Why data: field knowledge changes faster than code (a new aws-ofi-nccl message, a new
remedy); each entry is reviewed on its own, carries its source, and `explain` prints it
as written. An entry fires on its text patterns (`lines`: a cheap `needle` substring, then
a regex) or on a named fact predicate (`when`, evaluated over the folded facts), or both.
Facts from the fold are in efa_validators/parse/facts.py; the predicates are in
efa_validators/judge/predicates.py.
"""

import functools
import re
from typing import List, Optional

from efa_validators.judge import envcheck
from efa_validators.judge.predicates import PREDICATES, crash_kind

# sources: files in public repositories (owner/name path); the commits read are in docs/validators.md
_NCCL_PLUGIN = (
    "NVIDIA/nccl src/plugin/plugin_open.cc, src/plugin/net.cc (src/net.cc before 2.23); "
    "aws/aws-ofi-nccl INSTALL.md (NCCL_NET_PLUGIN, the library path)"
)
_NCCL_FALLBACK = "NVIDIA/nccl src/plugin/net.cc (internal IB, then Socket, after the external plugins)"
_TWO_LIBFABRICS = "aws/aws-ofi-nccl INSTALL.md (--with-libfabric: one libfabric, the EFA installer's)"
_NO_DEVICE = (
    "aws/aws-ofi-nccl src/nccl_ofi_ofiutils.cpp (fi_getinfo), src/nccl_ofi_net.c before b8628aa5 "
    "('Couldn't find any optimal provider')"
)
_GDR = (
    "aws/aws-ofi-nccl src/platform-aws.cpp ('GDR disabled on GDR-supported instance type', gdr_required), "
    "src/nccl_ofi_ofiutils.cpp ('disabling GDR'); amzn/amzn-drivers kernel/linux/efa (GPUDirect in the "
    "EFA driver)"
)
_WRONG = "NVIDIA/nccl-tests src/common.cu (#wrong: values failing the data check)"
_HANG = (
    "NVIDIA/nccl-tests src/common.cu (-T timeout); aws-samples/awsome-distributed-training "
    "micro-benchmarks/nccl-tests/README.md"
)
_WATCHDOG = "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (watchdog timeout)"

CATALOG = [
    {
        "id": "plugin-dependency-missing",
        "severity": "error",
        "title": "the net plugin is installed but a library it needs is missing",
        "when": "plugin_dep_missing",
        "remedy": "This is the root cause of the plugin not loading: put the directory of the missing "
        "library on LD_LIBRARY_PATH or in ldconfig (libfabric: /opt/amazon/efa/lib or lib64); "
        "`ldd <plugin .so>` must show no 'not found'.",
        "source": "NVIDIA/nccl src/plugin/plugin_open.cc (dlerror printed as '%s/Plugin: %s: %s'); "
        "aws/deep-learning-containers test/sanity/scripts/check_nccl_efa_gdrcopy.sh (ldd check)",
    },
    {
        "id": "plugin-missing",
        "severity": "error",
        "title": "NCCL did not find the aws-ofi-nccl net plugin",
        "when": "plugin_missing",
        "remedy": "Put the plugin's directory (e.g. /opt/amazon/ofi-nccl/lib or /opt/aws-ofi-nccl/lib) on "
        "LD_LIBRARY_PATH or name it in NCCL_NET_PLUGIN; set NCCL_NET='AWS Libfabric' (or 'Libfabric' for "
        "plugins >= 1.13) so a missing plugin fails loudly instead of falling back.",
        "source": _NCCL_PLUGIN,
    },
    {
        "id": "ofi-init-failed",
        "severity": "error",
        "title": "aws-ofi-nccl loaded but failed to initialise",
        "when": "plugin_init_failed",
        "remedy": "Read the NET/OFI WARN lines before the failure: usually no EFA device visible, a "
        "libfabric older than the plugin needs (>= 1.22 for the AWS platform), or GDR unavailable on a "
        "GDR-required instance.",
        "source": "aws/aws-ofi-nccl src/nccl_ofi_net.cpp (nccl_net_ofi_create_plugin)",
    },
    {
        "id": "socket-fallback",
        "severity": "error",
        "title": "NCCL fell back to TCP sockets",
        "when": "socket_fallback",
        "remedy": "Make the plugin load and initialise (see plugin-missing / ofi-init-failed); pass the EFA "
        "devices into the container; set NCCL_NET so the fallback is an error.",
        "source": _NCCL_FALLBACK,
    },
    {
        "id": "network-ib",
        "severity": "error",
        "title": "NCCL ran over its own InfiniBand/RoCE verbs transport, not over EFA",
        "when": "network_ib",
        "remedy": "On AWS, NCCL reaches EFA only through aws-ofi-nccl ('Using network Libfabric'): install "
        "the plugin and make NCCL load it (see plugin-missing). On an InfiniBand or RoCE cluster NET/IB is "
        "that fabric's own network and this report's EFA verdict does not apply to it.",
        "source": "NVIDIA/nccl src/transport/net_ib.cc ('NET/IB'), src/plugin/net.cc (internal IB before "
        "Socket when no external plugin loads)",
    },
    {
        "id": "provider-not-efa",
        "severity": "error",
        "title": "libfabric selected a provider other than efa",
        "when": "provider_not_efa",
        "remedy": "Unset FI_PROVIDER or set it to efa; check `fi_info -p efa -t FI_EP_RDM` lists devices.",
        # a provider is judged against the platform, never alone (verdict.judge_provider): each fabric's
        # own providers; `--fabric NAME` declares one, and with no declaration and no EFA platform shown, a
        # provider that is another fabric's own is right for that fabric
        "fabrics": {
            "efa": {"name": "AWS EFA", "providers": ["efa", "efa-direct"]},
            "slingshot": {"name": "HPE Slingshot", "providers": ["cxi"]},
            "infiniband": {"name": "InfiniBand/RoCE", "providers": ["verbs"]},
            "omnipath": {"name": "Omni-Path", "providers": ["opx", "psm2"]},
            "psm3": {"name": "Intel Ethernet (PSM3)", "providers": ["psm3"]},
        },
        "source": "aws/aws-ofi-nccl doc/efa-env-var.md; ofiwg/libfabric man/fi_cxi.7.md, fi_verbs.7.md, "
        "fi_opx.7.md, fi_psm2.7.md, fi_psm3.7.md (each provider's fabric)",
    },
    {
        "id": "two-libfabrics",
        "severity": "error",
        "title": "two libfabric builds on the library path",
        "lines": [
            {"needle": "not found (required by", "regex": r"version `(?:EFA|FABRIC)_[0-9.]+' not found"}
        ],
        "remedy": "Keep one libfabric, the EFA installer's (/opt/amazon/efa/lib); remove the distribution's "
        "libfabric1 or take it off LD_LIBRARY_PATH/ldconfig.",
        "source": _TWO_LIBFABRICS,
    },
    {
        "id": "efa-devices-missing",
        "severity": "error",
        "title": "no EFA device visible to libfabric",
        "lines": [
            {
                "needle": "fi_getinfo",
                "regex": r"fi_getinfo\(\) call failed|fi_getinfo: provider efa output empty",
                "scan": True,  # libfabric's own line carries no NCCL needle
            },
            {"needle": "optimal provider", "regex": r"Couldn't find any optimal provider"},
            {"needle": "No eligible providers", "regex": r"No eligible providers"},
        ],
        "remedy": "Pass /dev/infiniband/uverbs* into the container (docker --device, or request "
        "vpc.amazonaws.com/efa in the pod spec) and run on an EFA-enabled instance/ENI.",
        "source": _NO_DEVICE,
    },
    {
        "id": "libfabric-too-old",
        "severity": "error",
        "title": "libfabric older than the plugin requires",
        "lines": [{"needle": "requires at least libfabric", "regex": r"requires at least libfabric version"}],
        "remedy": "Install an EFA installer whose libfabric is >= 1.22 (aws-ofi-nccl AWS platform).",
        "source": "aws/aws-ofi-nccl src/nccl_ofi_net.cpp (query_provider_capabilities)",
    },
    {
        "id": "gdr-disabled",
        "severity": "error",
        "title": "GPUDirect RDMA is not in use on the network path",
        "when": "gdr_off",
        "remedy": "GPUDirect RDMA over EFA comes from the EFA kernel driver itself (not nvidia_peermem, "
        "which is for Mellanox NICs): use an EFA driver >= 1.6 on the host and, with the open NVIDIA kernel "
        "driver, AWS's efa_nv_peermem or DMA-BUF; `cat /sys/class/infiniband/*/device/p2p` must say "
        "NVIDIA. On GDR-capable instances (p4/p5/p6) the plugin refuses to run without it; g5/g6e and "
        "p5.4xlarge run EFA without GDR by design.",
        "source": _GDR,
    },
    {
        "id": "device-rdma-unsupported",
        "severity": "error",
        "title": "FI_EFA_USE_DEVICE_RDMA=1 on an EFA device without RDMA read",
        "lines": [{"needle": "rdma-read", "regex": r"EFA device has no rdma-read capability", "scan": True}],
        "remedy": "Do not set FI_EFA_USE_DEVICE_RDMA (libfabric >= 1.18 with aws-ofi-nccl >= 1.7 decide "
        "themselves); the device does not support RDMA read.",
        "source": "aws/aws-ofi-nccl doc/efa-env-var.md; libfabric prov/efa",
    },
    {
        "id": "mr-registration-failed",
        "severity": "error",
        "title": "memory registration failed",
        "lines": [{"needle": "register memory", "regex": r"Unable to register memory \(type = \d+\)"}],
        # the type printed picks the remedy: NCCL's net API NCCL_PTR_HOST = 1, NCCL_PTR_CUDA = 2
        "remedy_by": [
            (
                r"\(type = 1\)",
                "Type 1 is host memory: RC 12 (ENOMEM) is almost always the locked-memory limit. Raise "
                "memlock (`ulimit -l unlimited`, docker `--ulimit memlock=-1`, the pod's or Slurm's limits); "
                "FI_EFA_SET_CUDA_SYNC_MEMOPS does not apply to host memory.",
            ),
            (
                r"\(type = 2\)",
                "Type 2 is CUDA memory: with NCCL >= 2.19 on libfabric 1.18-1.19 (EFA installer < 1.29) "
                "set FI_EFA_SET_CUDA_SYNC_MEMOPS=0, or upgrade the EFA installer to >= 1.29.",
            ),
        ],
        "remedy": "Read the RC and type in the line: type 1 is host memory (memlock limit), type 2 is CUDA "
        "memory (FI_EFA_SET_CUDA_SYNC_MEMOPS=0 on libfabric 1.18-1.19, or EFA installer >= 1.29).",
        "source": "aws/aws-ofi-nccl src/nccl_ofi_sendrecv.cpp ('Unable to register memory (type = %d)'), "
        "issue 584; awsome-distributed-training efa-cheatsheet.md",
    },
    {
        "id": "completion-error",
        "severity": "error",
        "title": "a network operation completed with an error",
        "lines": [
            {"needle": "completed with error", "regex": r"completed with error"},
            {"needle": "fi_cq_readerr", "regex": r"Unable to read from fi_cq_readerr"},
            {"needle": "CQ error", "regex": r"\bCQ error\b", "scan": True},
            {"needle": "Unresponsive re", "regex": r"Unresponsive (?:receiver|remote)", "scan": True},
            {"needle": "Unreachable remote", "regex": r"Unreachable remote", "scan": True},
            {
                "needle": "Unexpected status",
                "regex": r"Unexpected status (?:returned by responder|\(-?\d+\) for message)",
                "scan": True,
            },
            # libfabric's efa provider reports a failed operation as `err: N, message: <status text> My EFA
            # addr: ... Peer EFA addr: ... Peer host id: ...` (<info> for the user's operation, <warn> for
            # its own): any status, not only those named above. The scan passes it by `<warn>`
            # (libfabric-warn): an <info> one is followed by aws-ofi-nccl's own `completed with error` WARN
            {"needle": ", message", "regex": r"\berr: -?\d+, message: .*(?:Peer EFA addr|Peer host id)"},
            {
                "needle": "Got completion",
                "regex": r"NET/IB ?: ?Got completion (?:from peer \S+ )?with (?:error|status)",
            },
        ],
        "when": "completion_errors",
        "remedy_by": [
            (
                r"Unreachable remote|security group|err: 113\b",
                "The peer never answered: the security group must allow all traffic to and from itself "
                "(inbound and outbound), and both instances must be in one subnet and placement group.",
            ),
            (
                r"Unresponsive re",
                "The peer stopped answering: its process died or hung first; read the log of the peer named "
                "(host id / address) for its first error, and test that node pair (pairwise nccl-tests).",
            ),
        ],
        "remedy": "A network operation failed on the wire: read the provider's error text; if the line "
        "names a peer, check that node first (pairwise nccl-tests, `fi_info -p efa`), then the security "
        "group.",
        "source": "aws/aws-ofi-nccl include/nccl_ofi_platform.h and src/platform-aws.cpp (log_cq_error: "
        "'Request %p (%s) completed with error: ... strerror'), src/nccl_ofi_rdma.cpp ('Unexpected status "
        "(%d) for message'), src/nccl_ofi_sendrecv.c before d04444ec ('Request %p completed with error. RC "
        "... Error: %d (%s)'); ofiwg/libfabric prov/efa/src/efa_errno.h (status texts: 'Unresponsive "
        "receiver', 'Unreachable remote', 'Unexpected status returned by responder'), "
        "prov/efa/src/rdm/efa_rdm_error.h ('Peer EFA addr', 'Peer host id'), prov/efa/src/rdm/efa_rdm_ope.c "
        "('err: %d, message: %s (%d)' at af8ddbe9); NVIDIA/nccl "
        "src/transport/net_ib.cc ('Got completion from peer'); torvalds/linux "
        "drivers/net/ethernet/mellanox/mlx5/core/eq.c ('CQ error on CQN 0x%x, syndrome 0x%x')",
    },
    {
        "id": "bootstrap-interface",
        "severity": "error",
        "title": "NCCL's bootstrap could not use a network interface or address",
        "lines": [
            {"needle": "interface found", "regex": r"[Nn]o (?:usable listening |socket )?interface found"},
            {"needle": "same subnet", "regex": r"No interface found in the same subnet"},
            {
                "needle": "family",
                "regex": r"[Uu]nsupported (?:address|IP) family|is neither AF_INET\(\d+\) nor AF_INET6"
                r"|Address family not supported",
            },
            {
                "needle": "pair found",
                "regex": r"No valid (?:<IPv4_or_hostname>:<port>|\[IPv6\]:port) pair found",
            },
            {"needle": "getting address info", "regex": r"error encountered when getting address info"},
            {
                "needle": "onnect to ",
                "regex": r"[Cc]onnect to \S+ failed : "
                r"(?:Network is unreachable|Cannot assign requested address)",
            },
        ],
        "remedy": "Give NCCL's bootstrap an interface that carries its address: set NCCL_SOCKET_IFNAME to "
        "the node's primary interface (e.g. '^docker,lo,veth' or 'ens'), make MASTER_ADDR / NCCL_COMM_ID an "
        "address of the family that interface has, and set NCCL_SOCKET_FAMILY=AF_INET (or AF_INET6) to pin "
        "one family.",
        "source": "NVIDIA/nccl src/bootstrap.cc ('Bootstrap : no socket interface found', 'NET/Socket : No "
        "usable listening interface found'), src/misc/socket.cc ('Net : Unsupported address family type', "
        "'No interface found in the same subnet', 'is neither AF_INET(%d) nor AF_INET6(%d)', "
        "NCCL_SOCKET_FAMILY), src/os/linux.cc ('connect to %s failed : %s'), src/transport/net_socket.cc "
        "('no interface found')",
    },
    {
        "id": "rank-topology-mismatch",
        "severity": "error",
        "title": "ranks of one job disagree on their network topology",
        "lines": [
            {
                "needle": "mixed local Net device",
                "regex": r"Detected mixed local Net device counts across ranks",
            },
            {"needle": "number of remote", "regex": r"Unexpected number of remote (?:control )?rails"},
            {
                "needle": "unexpected number of devices",
                "regex": r"Topology reported unexpected number of devices",
            },
            {"needle": "mismatch in info", "regex": r"Bootstrap Root : mismatch in info from procs"},
        ],
        "when": "ranks_disagree",
        "remedy": "Give every rank the same view of its node: the same EFA devices in every container or "
        "pod (request the instance's whole vpc.amazonaws.com/efa count), the same plugin rail settings "
        "(OFI_NCCL_* / NCCL_NET_* env) and the same image; the rank that sees fewer NICs names the pod or "
        "node to fix.",
        "source": "NVIDIA/nccl src/init.cc ('Detected mixed local Net device counts across ranks'), "
        "src/bootstrap.cc ('Bootstrap Root : mismatch in info from procs'); aws/aws-ofi-nccl "
        "src/nccl_ofi_rdma.cpp ('Unexpected number of remote rails', 'Topology reported unexpected number "
        "of devices'), src/nccl_ofi_net.cpp ('Selected provider is %s ... (found %d nics)')",
    },
    {
        "id": "topology-attribute-missing",
        "severity": "error",
        "title": "NCCL's topology detection missed an attribute of the node",
        "lines": [
            {"needle": "of node", "regex": r"Attribute \S+ of node \S+ not found"},
            {"needle": "XML Mismatch", "regex": r"XML Mismatch"},
        ],
        "remedy": "NCCL could not read the node's PCI/NIC layout from sysfs: run the container with the "
        "host's /sys visible (not masked), or give NCCL the instance's topology file (NCCL_TOPO_FILE; "
        "aws-ofi-nccl ships them for p4d/p5); NCCL_TOPO_DUMP_FILE shows which node lacks the attribute.",
        "source": "NVIDIA/nccl src/graph/xml.h ('Attribute %s of node %s not found'), src/graph/xml.cc "
        "('XML Mismatch'), src/init.cc (ncclInternalError: 'internal error - please report this issue')",
    },
    {
        "id": "resource-allocation-failed",
        "severity": "error",
        "title": "a memory, launcher or fabric resource could not be allocated",
        "lines": [
            {"needle": "Failed to ", "regex": r"Failed to (?:CUDA )?(?:malloc|calloc|host alloc)"},
            {"needle": "out of memory", "regex": r"Cuda failure 'out of memory'"},
            # PyTorch's CUDA check (a line holding 'error': through the line filter)
            {"needle": "out of memory", "regex": r"CUDA error: out of memory"},
            {"needle": "unable to allocate", "regex": r"NET/Socket ?: ?unable to allocate"},
            {
                "needle": "llocat",
                "regex": r"NET/OFI .*(?:[Uu]nable to allocate|[Ff]ailed to allocate|allocation failed)",
            },
            {"needle": "cuMemAlloc failed", "regex": r"NET/OFI cuMemAlloc failed"},
            {"needle": "allocate resources", "regex": r"Unable to allocate resources", "scan": True},
            {"needle": "Insufficient vpc", "regex": r"Insufficient vpc\.amazonaws\.com/efa", "scan": True},
        ],
        "remedy_by": [
            (
                r"out of memory|CUDA (?:malloc|calloc)|cuMemAlloc",
                "GPU memory ran out: another process may hold the GPU (`nvidia-smi`), or the job's own "
                "memory leaves NCCL no room; leave NCCL_BUFFSIZE at its default and lower the batch.",
            ),
            (
                r"Failed to (?:malloc|host alloc)|NET/Socket : unable|NET/OFI",
                "Host memory ran out or is capped: raise the container's memory limit and memlock (`ulimit "
                "-l unlimited`, docker `--ulimit memlock=-1`).",
            ),
            (
                r"Insufficient vpc",
                "The pod asked for more EFA devices than a node has free: request the instance's count (p5: "
                "32, p4d: 4) on nodes whose EFA device plugin runs, one such pod per node.",
            ),
            (
                r"Unable to allocate resources",
                "Slurm refused the allocation: check the partition, node count, GRES and constraints asked "
                "for against `sinfo`.",
            ),
        ],
        "remedy": "Read the line for what could not be allocated: GPU or host memory, a Slurm allocation, "
        "or EFA devices for a pod.",
        "source": "NVIDIA/nccl src/include/alloc.h ('Failed to CUDA calloc', 'Failed to malloc'), "
        "src/include/checks.h (\"Cuda failure '%s'\"), src/transport/net_socket.cc ('unable to allocate'); "
        "pytorch/pytorch c10/cuda/CUDAException.cpp ('CUDA error: ' + cudaGetErrorString at 0e4c6cd6); "
        "aws/aws-ofi-nccl src/nccl_ofi_freelist.cpp, src/nccl_ofi_cuda.cpp ('cuMemAlloc failed'); "
        "SchedMD/slurm src/srun/libsrun/allocate.c ('Unable to allocate resources: %s'); kubernetes "
        "pkg/scheduler/framework/plugins/noderesources/fit.go ('Insufficient %v')",
    },
    {
        "id": "launcher-start-failed",
        "severity": "error",
        "title": "the launcher could not start the ranks",
        "lines": [
            # one needle for both (each scan needle is one more pass over the log)
            {"needle": "failed on ", "regex": r"\bstart failed on [^\s:]+", "scan": True},
            {"needle": "failed on ", "regex": r"CXI alloc failed on cxi\d+", "scan": True},
        ],
        "when": "launch_failed",
        "remedy_by": [
            (
                r"CXI alloc failed|exceeds ACs",
                "The Slingshot NIC had no room for the job's CXI service (its ACs, VNIs or queues): list "
                "the services left on that node (`cxi_service list`) and remove stale ones, or ask for fewer "
                "ranks per node; a launcher or prolog must ask for resources within the device's limits.",
            ),
        ],
        "remedy": "Read the reason after the host: the node is down or unreachable, the launcher's daemon "
        "(slurmd, prted) is not running there, or a resource the launch needs is exhausted; fix that node "
        "or leave it out, then launch again.",
        "source": "The launcher's own text as issue 41 reports it from real logs "
        "('start failed on HOST: ...'; "
        "HPE Slingshot's 'CXI alloc failed on cxi0: request exceeds ACs limits'): no public source file "
        "was found for either line; flux-framework/flux-coral2 issue 407 and PR 408 (a CXI service "
        "allocation refused past the device's limits)",
    },
    {
        "id": "gdrcopy-unavailable",
        "severity": "warning",
        "title": "aws-ofi-nccl's GIN could not use GDRCopy",
        # a warning: NCCL then tries its other GIN plugins, and a program that uses no GIN runs on; where GIN
        # was needed, the failure names this as its cause (judge/causes.py LINKS)
        "lines": [
            {"needle": "initialize GDRCopy", "regex": r"Failed to initialize GDRCopy"},
            {"needle": "requires GDRCopy", "regex": r"GIN requires GDRCopy [\d.]+"},
        ],
        "when": "gdrcopy_failed",
        "remedy": "Install GDRCopy >= 2.5 in the image (libgdrapi.so on the library path) and load its "
        "gdrdrv kernel module on the host with /dev/gdrdrv passed into the container; or, where the program "
        "needs no GIN, set NCCL_GIN_ENABLE=0.",
        "source": "aws/aws-ofi-nccl src/rdma/gin/nccl_ofi_gin_api.cpp ('Failed to initialize GDRCopy: %s', "
        "'GIN requires GDRCopy 2.5+ for forced PCIe copy support'), src/nccl_ofi_gdrcopy.cpp ('Could not "
        "load libgdrapi.so', 'Failed to open gdr handle') at 2daf7d30",
    },
    {
        "id": "gin-init-failed",
        "severity": "warning",
        "title": "NCCL initialised no GIN plugin",
        "lines": [
            {
                "needle": "any GIN plugin",
                "regex": r"GIN/Plugin: Failed to initialize any GIN plugin",
                "scan": True,
            },
        ],
        "remedy": "Read the WARN lines before it: aws-ofi-nccl's GIN needs its net plugin in use (not "
        "NCCL_NET=Socket), the RDMA protocol and GDRCopy >= 2.5; a program that uses no GIN runs on "
        "without.",
        "source": "NVIDIA/nccl src/plugin/gin.cc ('GIN/Plugin: Failed to initialize any GIN plugin') at "
        "5067397c",
    },
    {
        "id": "gin-unavailable",
        "severity": "error",
        "title": "the program asked for GIN (GPU-initiated networking) and NCCL has none",
        "lines": [
            {"needle": "GIN not supported", "regex": r"NCCL WARN GIN not supported"},
            {"needle": "requested GIN", "regex": r"NCCL WARN User requested GIN but not all ranks"},
            {"needle": "GIN-capable", "regex": r"NCCL WARN No GIN-capable devices found"},
            {"needle": "WARN GIN is disabled", "regex": r"NCCL WARN GIN is disabled"},
        ],
        "remedy_by": [
            (r"GIN is disabled", "NCCL_GIN_ENABLE=0 turns GIN off: unset it for a program that uses GIN."),
        ],
        "remedy": "Make a GIN plugin initialise on every rank (the lines before it say why it did not: "
        "GDRCopy, the net plugin, the protocol), or run the program without its GIN (device API) "
        "path.",
        "source": "NVIDIA/nccl src/gin/gin_host.cc ('GIN is disabled.', 'GIN not supported.', "
        "'No GIN-capable devices found.'), src/dev_runtime.cc ('User requested GIN but not all ranks in "
        "the communicator support GIN') at 5067397c",
    },
    {
        "id": "ll-corruption",
        "severity": "error",
        "title": "nccl-tests found wrong results (LL/LL128 over an unordered transport)",
        "when": "tests_wrong",
        "remedy": "Use aws-ofi-nccl >= 1.6 (it forces the simple protocol when ordering is missing), or set "
        "NCCL_PROTO=simple with plugins <= 1.5.",
        "source": _WRONG,
    },
    {
        "id": "crash",
        "severity": "error",
        "title": "a process of the job failed or died",
        "lines": [
            # a task that ended with a non-zero code: the job failed, whatever the text before says
            {
                "needle": "Exited with exit code",
                "regex": r"srun: error: \S+: tasks? [\d,-]+: Exited with exit code [1-9]",
            }
        ],
        "when": "crashed",
        "remedy": "Read the named rank's last lines: the NCCL WARN before a `Test NCCL failure` names the "
        "cause; a signal (11: segmentation fault, 9: killed, often out of memory) stops the process, and the "
        "other ranks then hang or abort: fix the first rank that died.",
        "source": "NVIDIA/nccl-tests src/common.h (CUDACHECK/NCCLCHECK/TESTCHECK); Open MPI mpirun "
        "'exited on signal'; Slurm srun 'error: NODE: task N'; SchedMD/slurm src/plugins/launch/slurm/"
        "launch_slurm.c ('%s: %s %s: Exited with exit code %d', as bookworm's launch_slurm.so holds it)",
    },
    {
        "id": "hang",
        "severity": "error",
        "title": "the run stalled or lost its peers",
        "lines": [
            {"needle": "unhandled system error", "regex": r"unhandled system error"},
            {"needle": "open AV", "regex": r"Couldn't open AV"},
            {"needle": "network error", "regex": r"remote process exited or there was a network error"},
        ],
        "when": "stalled",
        "remedy": "Run with nccl-tests -T (timeout) and a process watchdog; test node pairs to find the bad "
        "one; check the security group allows all traffic to itself (outbound too).",
        "source": _HANG,
    },
    {
        "id": "watchdog-timeout",
        "severity": "error",
        "title": "PyTorch's NCCL watchdog timed out a collective",
        "when": "watchdog",
        "remedy": "As for a hang: find the rank/node that stopped (pairwise nccl-tests), check EFA health; "
        "raising the timeout only hides it.",
        "source": _WATCHDOG,
    },
    {
        "id": "watchdog-hang",
        "severity": "error",
        "title": "PyTorch's heartbeat monitor found the NCCL watchdog stuck",
        # distinctive words that match alone too: a message hard-wrapped at a fixed column is joined first
        # (efa_validators/scan/wrapped.py), and a half that holds these still names its line
        "lines": [
            # the scan passes these lines by scan/wrapped.py's needles (its words, and c10d's log prefix)
            {"needle": "got stuck for", "regex": r"watchdog got stuck for \d+ seconds"},
            {"needle": "eartbeat monitor timed out", "regex": r"Heartbeat monitor timed out"},
        ],
        "when": "watchdog_stuck",
        "remedy": "A NCCL or CUDA call hung under the watchdog: find the rank that stopped first (its log's "
        "first error), check that node's GPUs and EFA (pairwise nccl-tests); raising "
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC or disabling the monitor only hides it.",
        "source": "pytorch/pytorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp at cf1380df "
        "(HeartbeatMonitor: \"ProcessGroupNCCL's watchdog got stuck for %d seconds without making progress "
        "in monitoring enqueued collectives\", 'Heartbeat monitor timed out!')",
    },
    {
        "id": "cuda-driver-too-old",
        "severity": "error",
        "title": "the CUDA driver is older than the CUDA runtime in the image",
        "lines": [
            {"needle": "insufficient", "regex": r"driver version is insufficient for CUDA runtime"},
            {"needle": "too old", "regex": r"NVIDIA driver on your system is too old"},
        ],
        "when": "driver_older_than_runtime",
        "remedy": "Use an image whose CUDA runtime the host driver supports, or install the CUDA forward "
        "compatibility package (cuda-compat) in the image.",
        "source": "NVIDIA CUDA compatibility guide",
    },
    {
        "id": "libfabric-warn",
        "severity": "warning",
        "title": "libfabric printed warning lines",
        # libfabric's own log line (FI_LOG_LEVEL=warn or finer):
        # `libfabric:PID:TIME:PREFIX:PROVIDER:SUBSYSTEM:function():LINE<warn> message`, alone or indented in a
        # pasted log; the signatures above name the warnings they know, this one keeps any other in view
        "lines": [
            {
                "needle": "<warn>",
                "regex": r"libfabric:\d+:\d+:[^:\s]*:[^:\s]+:[^:\s]+:\S+\(\):\d+<warn> ",
                "scan": True,
            }
        ],
        "remedy": "Read the provider and function each line names: a warning before a failure usually says "
        "what the provider could not do (a device, an address, a memory registration).",
        "source": "ofiwg/libfabric src/log.c (ofi_log: '%s:%d:%ld:%s:%s:%s:%s():%d<%s> %s' at af8ddbe9)",
    },
    {
        "id": "python-exception",
        "severity": "error",
        "title": "a Python process raised an exception",
        # a traceback, and the exception line that ends it (kept apart: `as`), which says what was raised
        "lines": [
            {
                "needle": "Traceback (most recent",
                "regex": r"Traceback \(most recent call last\)",
                "scan": True,
            },
            {
                "needle": "Error",
                "regex": r"^\s*(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*Error(?:: |$)",
                "as": "exception-line",
                "scan": True,
            },
        ],
        "when": "python_exception",
        "remedy": "Read the exception line and the frames above it: an NCCL or CUDA error in it names the "
        "failure the lines before the traceback show; fix that first rank's cause.",
        "source": "python/cpython Lib/traceback.py ('Traceback (most recent call last):', then "
        "'<type>: <message>' as format_exception_only writes it)",
    },
    {
        "id": "nccl-warn",
        "severity": "warning",
        "title": "NCCL printed WARN lines",
        "when": "warn_lines",
        "remedy": "Read them: most WARNs precede a failure; the ones above name the component.",
        "source": "NVIDIA/nccl debug.cc (WARN level)",
    },
]


CATALOG += envcheck.CATALOG  # misconfigurations the log shows (efa_validators/judge/envcheck.py)


class _LinePattern:
    __slots__ = ("sig", "needle", "regex", "words")

    def __init__(self, sig: str, needle: str, regex: str, words=None) -> None:
        self.sig = sig
        self.needle = needle
        self.regex = re.compile(regex)
        self.words = words  # the words one of which stands right before the needle where it matches


# a pattern's hits count for its entry, or (`as`) in an evidence list of their own that a predicate reads
_LINE_PATTERNS = [
    _LinePattern(p.get("as", e["id"]), p["needle"], p["regex"], p.get("words"))
    for e in CATALOG
    for p in e.get("lines", ())
]
BY_ID = {e["id"]: e for e in CATALOG}


def needles() -> List[str]:
    """Substrings the line scanner must add for the text signatures.

    Most signature lines already hold one of the parser's needles (NET/OFI lines hold `NET`,
    `version ... not found` holds `ersion`, `unhandled system error` holds `error`); only the
    patterns marked `scan` (libfabric's own lines) need their own pass over the log. Every
    signature has a fixture in tests/fixtures/logs that proves its line gets through.
    """
    return sorted({p["needle"] for e in CATALOG for p in e.get("lines", ()) if p.get("scan")})


# (needle, bound regex search, id) per pattern: the per-line loop reads no attributes
_LINE_CHECKS = tuple((p.needle, p.regex.search, p.sig) for p in _LINE_PATTERNS)


_NEEDLES = tuple(sorted({needle for needle, _, _ in _LINE_CHECKS}))


def line_needles() -> List[str]:
    """The substrings `match_line` looks for first: a text that holds none of them matches no signature."""
    return list(_NEEDLES)


def holds_line_needle(text: str) -> bool:
    """One of `line_needles()` is in `text` (a plain loop: no tuple unpacked per needle)."""
    for needle in _NEEDLES:
        if needle in text:
            return True
    return False


def match_line(text: str) -> List[str]:
    """Ids of the signatures whose text pattern this line shows.

    Hot path (runs on every line handed on): the substring tests reject nearly every line
    (`holds_line_needle` first), so the list is built only on a hit.
    """
    if not holds_line_needle(text):
        return []
    hits = None
    for needle, anyone, checks in _GROUPS:
        if needle in text and (anyone is None or anyone(text)):
            for search, sig in checks:
                if search(text):
                    if hits is None:
                        hits = [sig]
                    elif sig not in hits:
                        hits.append(sig)
    return hits or []


def _groups() -> tuple:
    """(needle, a cheap test that one of its patterns can match or None, its (search, id) pairs), one per
    needle: each needle is tested once per line, and a needle many patterns share (`set by env`: every
    variable NCCL prints) first looks up the word before it among the patterns' `words`."""
    by = {}  # type: Dict[str, list]
    for p in _LINE_PATTERNS:
        by.setdefault(p.needle, []).append(p)
    out = []
    for needle, pats in by.items():
        anyone = None
        if len(pats) > 1 and all(p.words for p in pats):
            anyone = functools.partial(_word_before, needle, frozenset(w for p in pats for w in p.words))
        out.append((needle, anyone, tuple((p.regex.search, p.sig) for p in pats)))
    return tuple(out)


def _word_before(needle: str, words: frozenset, text: str) -> bool:
    """Whether one of `words` stands right before an occurrence of `needle` in `text` (space-separated)."""
    i = text.find(needle)
    while i > 0:
        if text[text.rfind(" ", 0, i - 1) + 1 : i - 1] in words:
            return True
        i = text.find(needle, i + 1)
    return False


_GROUPS = _groups()


def evaluate(facts, tests: Optional[dict] = None) -> List[dict]:
    """Findings for every catalog entry that fires, in catalog order."""
    findings = []
    for entry in CATALOG:
        message = None
        evidence = list(facts.signature_evidence.get(entry["id"], ()))
        if evidence:
            message = "%d matching line(s)" % facts.signature_counts.get(entry["id"], len(evidence))
        severity = entry["severity"]
        pred = PREDICATES.get(entry.get("when", ""))
        if pred is not None:
            res = pred(facts, tests)
            if res is not None:
                message = res[0] if message is None else f"{res[0]}; {message}"
                evidence = _dedupe(list(res[1]) + evidence)
                severity = res[2] if len(res) > 2 else severity  # the predicate weighed the facts
            elif entry.get("gate"):
                continue  # its lines only gather evidence: the predicate decides
        crashes = crash_kind(facts, "crash")
        if entry["id"] == "hang" and crashes and message is not None:
            # an `unhandled system error` line after a crash is the crash's echo, not a stall
            crash_lines = {(c["evidence"]["file"], c["evidence"]["line"]) for c in crashes}
            evidence = [e for e in evidence if (e.get("file"), e.get("line")) not in crash_lines]
            if not evidence:
                continue
        if message is None:
            continue
        remedy = entry["remedy"]
        if entry.get("remedy_by"):
            picked = [
                r for rx, r in entry["remedy_by"] if any(re.search(rx, e.get("text") or "") for e in evidence)
            ]
            remedy = " ".join(picked) or remedy
        findings.append(
            {
                "id": entry["id"],
                "severity": severity,
                "title": entry["title"],
                "message": message,
                "evidence": evidence[:8],
                "remedy": remedy,
                "source": entry["source"],
            }
        )
    return findings


def _dedupe(evidence: List[dict]) -> List[dict]:
    seen = set()
    out = []
    for e in evidence:
        k = (e.get("file"), e.get("line"))
        if k in seen:
            continue
        seen.add(k)
        out.append(e)
    return out
