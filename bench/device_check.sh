#!/usr/bin/env bash
# GPU device check for issue 5 (one short prepared script; ~15 min of device time in all, aim for < 5).
# On a machine with an NVIDIA GPU: the torch probe with the NCCL backend under torchrun, NCCL_DEBUG=INFO,
# run by the validator's runner (watchdog on), then node-check; prints the figures to record in
# bench/RESULTS-runner.md. Needs: torch with CUDA in the active Python (or PYTHON=...), nvidia-smi.
#   bash bench/device_check.sh            # results under ${OUT:-/tmp/device-check}
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/validators${PYTHONPATH:+:$PYTHONPATH}"  # efa_validators, from its src folder
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
NGPU=$(nvidia-smi -L 2>/dev/null | wc -l)
NPROC=${NPROC:-$(( NGPU > 0 ? NGPU : 1 ))}
echo "== gpus: $NGPU, processes: $NPROC"; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
"$PY" -c 'import torch;print("torch",torch.__version__,"cuda",torch.version.cuda,"nccl",torch.cuda.nccl.version())'
TORCHRUN=("$PY" -m torch.distributed.run)
echo "== probe: torchrun --nproc-per-node $NPROC (NCCL), under the runner"
timeout 420 "$PY" -m efa_validators run --timeout 300 --idle-timeout 120 --quiet \
  --log "$OUT/probe.log" --json "$OUT/run-report.json" --rank-logs "$OUT/ranks" -- \
  "${TORCHRUN[@]}" --nproc-per-node "$NPROC" --tee 3 -m efa_validators.probe_torch \
  --backend nccl --max-bytes 1G --json "$OUT/probe-rows.json"
echo "runner exit: $?"
echo "== the validator on the probe's real NCCL_DEBUG output"
"$PY" -m efa_validators parse "$OUT/probe.log" --json "$OUT/parse-report.json"; echo "parse exit: $?"
"$PY" - "$OUT" <<'PYEOF'
import json, sys
out = sys.argv[1]
r = json.load(open(out + "/run-report.json"))
print("verdict", r["verdict"], "nccl", r.get("nccl_version"), "network", r.get("network"), "efa", r["efa"], "gdr", r["gdr"])
print("run", {k: r["run"][k] for k in ("exit_code", "killed", "duration_s", "lines")})
for f in r["findings"]:
    print("finding", f["id"], f["severity"], f["message"][:160])
rows = json.load(open(out + "/probe-rows.json"))
print("torch", rows["torch"], "torch NCCL", rows["nccl_version"], "world", rows["world"])
for row in rows["rows"][-6:]:
    print("size %12d  time %10.1f us  algbw %7.2f  busbw %7.2f  wrong %d" % (row["size"], row["time_us"], row["algbw"], row["busbw"], row["wrong"]))
PYEOF
echo "== node-check"
timeout 120 "$PY" -m efa_validators node-check --json "$OUT/node-check.json"; echo "node-check exit: $?"
echo "== watchdog on the GPU: a 3 s timeout around a 2 GiB sweep must end as a hang, nothing left"
timeout 60 "$PY" -m efa_validators run --timeout 3 --quiet --json "$OUT/hang.json" -- \
  "${TORCHRUN[@]}" --nproc-per-node "$NPROC" -m efa_validators.probe_torch --backend nccl --max-bytes 2G --iters 50
echo "hang exit: $? (expect 1)"; sleep 2; pgrep -af efa_validators.probe_torch || echo "no probe left"
