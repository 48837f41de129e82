# Call B of RESULTS note 23: FA4 against cuDNN / flash at the families' shapes (accuracy vs fp32,
# sync and queued times), FLUX.1's best plan on cuDNN vs FA4 (and FA4 + CUDA graphs) against the
# plain step in one call, the GPU test of the op (eager and compiled vs SDPA math), then 50-step
# loss parity of the compiled fused FA4 step against eager bf16.
# On the device, after . .gpuwork/bench/device_env.sh; $OUT is the folder that comes back.
set -o pipefail
t0=$(date +%s)
python3 -m bench.probe_fa4 --out "$OUT" 2>&1 | tee "$OUT/probe_fa4.log" | grep '^|'
echo "probe_fa4 done at $(( $(date +%s) - t0 )) s"
python3 -m bench.probe_speed --out "$OUT" --deadline-s 300 flux:base,fp8+cudnng+lag+bt,fp8+fa4+lag+bt,fp8+fa4+lag+bt+cg 2>&1 \
  | tee "$OUT/speed.log" | python3 bench/show_rows.py
echo "speed done at $(( $(date +%s) - t0 )) s"
python3 -m pytest -m gpu tests/gpu/test_attention_gpu.py -o addopts="" -k fa4_matches -s -q -p no:cacheprovider 2>&1 \
  | tee "$OUT/pytest.log" | grep -E "fa4 |passed|failed|Error" | tail -12
echo "pytest done at $(( $(date +%s) - t0 )) s"
left=$(( 575 - ($(date +%s) - t0) ))
PROBE_PARITY_STEPS=50 PROBE_TIME=0 python3 -m bench.probe_speed --out "$OUT" --deadline-s $left flux:eager,ref+fa4+fbl 2>&1 \
  | tee "$OUT/parity.log" | python3 bench/show_rows.py
echo "all done at $(( $(date +%s) - t0 )) s"
