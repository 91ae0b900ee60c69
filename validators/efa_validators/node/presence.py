"""Where a node's GPUs are, beside what nvidia-smi lists: on the PCI bus, as device nodes, under a loaded
driver. What a GPU shortfall asks for (its remedy) is judged from these, so a container that was not given
its GPUs is never answered with hardware. Read from sysfs, /dev and /proc (under `root`: tests lay out a
tree).
"""

import os
import re
from typing import Callable, Dict, Optional, Tuple

# nodecheck.read_text, given by the caller: nodecheck imports this module (no import back, no cycle)
Reader = Callable[[str], Optional[str]]

# PCI ids (PCI-SIG code and id assignment; Linux sysfs /sys/bus/pci/devices/<bdf>/{vendor,class}): NVIDIA's
# vendor id, and the classes a GPU has, 0x0300xx VGA and 0x0302xx 3D controller (data-centre GPUs; NVSwitches
# are bridges, 0x0680xx, not counted).
NVIDIA_VENDOR = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")


def gpu_presence(read_text: Reader, root: str = "/") -> Dict[str, Optional[int]]:
    """What a GPU shortfall is judged on, beside nvidia-smi: NVIDIA GPUs on the PCI bus (sysfs shows the
    host's bus in a container too), /dev/nvidiaN device nodes (a container has only those its runtime passed
    in), and whether an NVIDIA kernel driver is loaded (1/0). None where that cannot be seen from here."""
    pci = os.path.join(root, "sys/bus/pci/devices")
    bus = None  # type: Optional[int]
    if os.path.isdir(pci):
        bus = 0
        for bdf in sorted(os.listdir(pci)):
            vendor = read_text(os.path.join(pci, bdf, "vendor")) or ""
            klass = read_text(os.path.join(pci, bdf, "class")) or ""
            if vendor.strip() == NVIDIA_VENDOR and klass.strip()[:6] in GPU_CLASSES:
                bus += 1
    dev = os.path.join(root, "dev")
    nodes = None  # type: Optional[int]
    if os.path.isdir(dev):
        nodes = len([e for e in os.listdir(dev) if re.fullmatch(r"nvidia[0-9]+", e)])
    driver = None  # type: Optional[int]
    if os.path.isdir(os.path.join(root, "proc")):
        driver = int(os.path.exists(os.path.join(root, "proc/driver/nvidia/version")))
    return {"bus": bus, "dev": nodes, "driver": driver}


def gpu_shortfall(listed: int, expected: Optional[int], seen: Dict[str, Optional[int]]) -> Tuple[str, str]:
    """(remedy, why) for a node whose nvidia-smi lists fewer GPUs than it should (or none, or fails).

    Judged from what the node shows, mildest first, so that a container is never answered with hardware:
    - no NVIDIA kernel driver loaded (and none answered nvidia-smi): configure (install or load it);
    - fewer /dev/nvidiaN nodes than GPUs on the bus (or than expected): configure, the container was not given
      all GPUs (`--gpus all`, the pod's nvidia.com/gpu limit): a device not mounted is a setting;
    - fewer NVIDIA GPUs on the PCI bus than the instance has: replace-hardware, a GPU missing from the bus is
      the node's hardware, which no setting or reboot brings back;
    - otherwise (the GPUs are on the bus and their device nodes exist, the driver does not list them, or no
      bus is visible to tell): reboot-node, which re-enumerates the bus and reloads the driver; NVIDIA's Xid
      catalog (docs.nvidia.com/deploy/xid-errors) resolves a GPU the driver lost (Xid 79, fallen off the bus)
      with a reset or reboot before any hardware action."""
    bus, nodes, driver = seen.get("bus"), seen.get("dev"), seen.get("driver")
    want = expected if expected is not None else bus
    shown = "PCI bus: %s NVIDIA GPU(s); /dev/nvidiaN: %s; driver loaded: %s" % (
        "?" if bus is None else bus,
        "?" if nodes is None else nodes,
        {None: "?", 0: "no", 1: "yes"}[driver],
    )
    if driver == 0 and not listed:  # nvidia-smi listing a GPU is the driver answering (/proc may be hidden)
        return (
            "configure",
            "no NVIDIA kernel driver is loaded (/proc/driver/nvidia): install or load it (%s)" % shown,
        )
    if nodes is not None and want is not None and nodes < want and (bus is None or bus >= want):
        return (
            "configure",
            "only %d GPU device node(s): not all GPUs were passed into this container (%s)"
            % (
                nodes,
                shown,
            ),
        )
    if bus is not None and expected is not None and bus < expected:
        return "replace-hardware", "a GPU is missing from the PCI bus (%s)" % shown
    return "reboot-node", "the driver lists %d of the GPUs (%s): a reboot re-enumerates them" % (
        listed,
        shown,
    )
