#!/usr/bin/env bash
# prelude of a device-call script (source it from the repository root on the GPU machine): $OUT for
# the files that come back, el (seconds since the start), the carried binaries and data unpacked,
# med (bench/runs/med.sh), and the GPU's name, driver, clock and temperature with the UTC time.
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/bt_out}; mkdir -p $OUT; T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
tar -xJf .carry/bins.tar.xz; mkdir -p data; cp -n .carry/data/* data/ 2>/dev/null
source bench/runs/med.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader; date -u
