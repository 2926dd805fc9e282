# tp_prelude.sh: the common start of the tensor/context-parallel GPU scripts (bench/tpcomp_gpu.sh,
# bench/zerotp_gpu.sh), sourced with NAME (the script's name in its messages) and BUILD_S (seconds a
# build may take) set. NVLink multicast off in every process; cd to the repository root; OUT; the
# carried data and binaries (NOBUILD=1: .carry/bins.tar.xz, else make); BIN checked; T1 = the time
# after the build (a script's budget counts from there); the GPU's name into $OUT/gpu.txt.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
T0=$(date +%s)
OUT=${OUT:-/tmp/bt_out}; mkdir -p "$OUT" data
cp -n .carry/data/* data/ 2>/dev/null
[ -n "${NOBUILD:-}" ] && [ -f .carry/bins.tar.xz ] && tar -xJf .carry/bins.tar.xz
BIN=${BIN:-./build/train_gpt2_cuda}
[ -z "${NOBUILD:-}" ] && timeout "$BUILD_S" make -j32 build/train_gpt2_cuda 2>&1 | grep -E "error" | head
[ -x "$BIN" ] || { echo "$NAME: no $BIN (build it, or NOBUILD=1 with .carry/bins.tar.xz)"; echo "$NAME: 0 passed, 1 failed"; exit 1; }
[ -f data/tinyshakespeare_train.bin ] || timeout 120 make data > /dev/null 2>&1
T1=$(date +%s)
timeout 10 nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$OUT/gpu.txt"
