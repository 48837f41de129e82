# Source on the GPU machine from the repository root of the device's checkout:
#   . .gpuwork/bench/device_env.sh
# Installs the carried wheels (.whl/) into /tmp/site once per machine, merges in the CuTe DSL's
# CUDA 13 libraries that an earlier call unpacked to /tmp/cu13 (nvidia-cutlass-dsl-libs-cu13 is
# ~240 MB unpacked, ~63 MB as tar.xz: it travels in two parts over two calls, see RESULTS note 32), sets PYTHONPATH
# (the .pth file of nvidia-cutlass-dsl is not read from PYTHONPATH: its dsl_packages folder is
# added by hand) and cds into .gpuwork (this session's src/, bench/, tests/).
if [ ! -f /tmp/site/.installed ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && touch /tmp/site/.installed
fi
# FA4's other wheels (flash-attn-4, nvidia-cutlass-dsl + libs-base + libs-core (cutlass.cute), quack-kernels,
# apache-tvm-ffi, torch-c-dlpack-ext: ~10 MB) travel in .whlfa4 (carried beside .whl in FA4 calls)
if [ -d .whlfa4 ] && [ ! -f /tmp/site/.fa4 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlfa4/*.whl \
    && touch /tmp/site/.fa4
fi
if [ -d /tmp/cu13/nvidia_cutlass_dsl ] && [ ! -f /tmp/site/.cu13 ]; then
  cp -a /tmp/cu13/nvidia_cutlass_dsl/. /tmp/site/nvidia_cutlass_dsl/ && touch /tmp/site/.cu13
fi
export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages:$PWD/.gpuwork/src:$PWD/.gpuwork
export PYTHONUNBUFFERED=1
cd .gpuwork || return 1
