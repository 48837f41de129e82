# Call 2 of RESULTS note 23: FA4 kernel accuracy and speed at the families' shapes, FLUX.1's best
# plan on cuDNN vs FA4 against the plain step (one call), then the GPU tests of fa4.
# On the device, after . .gpuwork/bench/device_env.sh; $OUT is the folder that comes back.
set -o pipefail
t0=$(date +%s)
python3 -c "import torch; from lorastudio.training.attention_fa4 import fa4_unavailable as f; print('fa4:', f(torch.device('cuda')) or 'available')" 2>&1 | tail -3
python3 -m bench.probe_fa4 --out "$OUT" 2>&1 | tee "$OUT/probe_fa4.log" | grep -v '^{'
echo "probe_fa4 done at $(( $(date +%s) - t0 )) s"
python3 -m bench.probe_speed --out "$OUT" --deadline-s 330 flux:base,fp8+cudnng+lag+bt,fp8+fa4+lag+bt 2>&1 \
  | tee "$OUT/speed.log" | python3 bench/show_rows.py
echo "speed done at $(( $(date +%s) - t0 )) s"
python3 -m pytest -m gpu tests/gpu/test_attention_gpu.py -o addopts="" -k fa4 -s -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest.log" | grep -E "fa4 |probe at|passed|failed|Error|error" | tail -20
echo "all done at $(( $(date +%s) - t0 )) s"
