#!/usr/bin/env bash
# The GPU telemetry agent against the REAL NVML, on a machine with an NVIDIA GPU and driver
# (CI has none: tests/agent/ drive the agent with a fake NVML of the binding's interface).
# Runs `sparkrun-k8s agent` from this checkout for about 10 s (no Kubernetes: --no-labels),
# prints its /v1/sample and the DCGM series of /metrics, and fails unless NVML answered and
# every GPU it listed was read (name, memory, utilisation).
#
#   hack/gpu-agent-check.sh [PYTHON]
#
# PYTHON: an interpreter with the product's dependencies (nvidia-ml-py among them); default
# .venv/bin/python (`make venv`), else python3. SPARKRUN_AGENT_PORT: the port (default 19400).
# Exit: 0 GPUs read; 1 NVML unavailable or no GPU read; 2 the agent did not start.
set -euo pipefail
cd "$(dirname "$0")/.."
py=${1:-}
if [[ -z $py ]]; then
  if [[ -x .venv/bin/python ]]; then py=.venv/bin/python; else py=python3; fi
fi
port=${SPARKRUN_AGENT_PORT:-19400}
work=$(mktemp -d)
PYTHONPATH="$PWD/operator${PYTHONPATH:+:$PYTHONPATH}" "$py" -m sparkrun_operator.cli.main agent \
  --no-labels --host 127.0.0.1 --port "$port" --interval 1 >"$work/agent.log" 2>&1 &
agent=$!
trap 'kill "$agent" 2>/dev/null || true; wait "$agent" 2>/dev/null || true; rm -rf "$work"' EXIT

"$py" - "$port" "$work/agent.log" <<'PY'
import json, sys, time, urllib.request

port, log = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"


def get(path: str) -> bytes | None:
    try:
        with urllib.request.urlopen(base + path, timeout=3) as answer:
            return answer.read(4 * 1024 * 1024)
    except OSError:
        return None


deadline, first = time.monotonic() + 30, None
while time.monotonic() < deadline and first is None:  # the agent starts (imports take seconds)
    first = get("/v1/sample")
    time.sleep(0.5)
if first is None:
    print(f"gpu-agent-check: the agent did not answer on {base}; its log:", file=sys.stderr)
    print(open(log).read()[-4000:], file=sys.stderr)
    sys.exit(2)
time.sleep(10)  # ten samples: rates (NVLink, host) need two
sample = json.loads(get("/v1/sample") or b"{}")
metrics = (get("/metrics") or b"").decode()
print(json.dumps(sample, indent=2))
print("\n".join(line for line in metrics.splitlines() if line.startswith(("DCGM_", "sparkrun_gpu_agent_"))))
nvml, gpus = sample.get("nvml") or {}, sample.get("gpus") or []
print(f"\nNVML available: {nvml.get('available')} (driver {nvml.get('driverVersion')}, "
      f"CUDA {nvml.get('cudaDriverVersion')}; error: {nvml.get('error')}); GPUs: {len(gpus)}")
unread = [g.get("index") for g in gpus
          if not g.get("name") or g.get("memoryTotalBytes") is None or g.get("utilizationPercent") is None]
if not nvml.get("available") or not gpus or unread:
    print(f"gpu-agent-check: FAILED: no GPU read through NVML (unread: {unread})", file=sys.stderr)
    sys.exit(1)
if "DCGM_FI_DEV_GPU_UTIL{" not in metrics:
    print("gpu-agent-check: FAILED: /metrics has no DCGM_FI_DEV_GPU_UTIL series", file=sys.stderr)
    sys.exit(1)
print("gpu-agent-check: OK")
PY
