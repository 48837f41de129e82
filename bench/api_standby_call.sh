# The API run at real size with the standby worker ready (RESULTS note 32, issue 31 item 1). On the device,
# after . .gpuwork/bench/device_env.sh (which cds into .gpuwork): bash bench/api_standby_call.sh
# CBUDGET (s, default 560) bounds the call; CSTEPS (default 200) the run's steps.
set -o pipefail
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -m bench.e2e_run build /tmp/e2e --family flux --place disk 2>&1 | tail -1 | cut -c1-400
echo "build done at $(( $(date +%s) - t0 )) s"
left=$(( ${CBUDGET:-560} - ($(date +%s) - t0) ))
python3 -m bench.e2e_run suite /tmp/e2e --family flux --steps ${CSTEPS:-200} --modes api --deadline-s $left --out $OUT > $OUT/api.log 2>&1
python3 - <<'PY'
import json
d = json.load(open("/tmp/e2e/e2e-flux-api.json"))
keep = {k: v for k, v in d.items() if k not in ("server_log", "worker_log")}
print(json.dumps(keep)[:3500])
PY
grep -E "lorastudio\." /tmp/e2e/serve-*.log | head -12
grep -E "frozen|prefetch|preflight|loading|load" /tmp/e2e/home/logs/*.log | head -12 | cut -c1-300
echo "api done at $(( $(date +%s) - t0 )) s"
