"""A tiny SageMaker-compatible training entry point: one all-reduce, then a model file.

SageMaker runs `python train.py` from /opt/ml/code (SAGEMAKER_PROGRAM) and collects /opt/ml/model.
With torch (DLC images) it joins the process group torchrun/SageMaker set up and all-reduces one tensor;
without torch (the local CPU image) it says so and writes the same model file, so the layout is testable.
"""

import json
import os
import socket
import sys


def main() -> int:
    model_dir = os.environ.get("SM_MODEL_DIR", "/opt/ml/model")
    result = {"host": socket.gethostname(), "world_size": 1, "allreduce": None}
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        print("torch not installed: skipping the all-reduce", file=sys.stderr)
    else:
        if "RANK" in os.environ:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend)
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            t = torch.ones(1, device="cuda" if backend == "nccl" else "cpu")
            dist.all_reduce(t)
            result["world_size"] = dist.get_world_size()
            result["allreduce"] = float(t.item())
            dist.destroy_process_group()
    os.makedirs(model_dir, exist_ok=True)
    with open(os.path.join(model_dir, "result.json"), "w") as fh:
        json.dump(result, fh)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
