#!/usr/bin/env bash
# On the GPU machine, from the project's root: install the carried wheels, then the check. Results: $OUT/results.jsonl
# Arguments go to the check (--only smoke,sampling / --skip pairs); CHECK_TIMEOUT_S bounds it (default 540 s).
OUT=${OUT:-$PWD/gpu-results}; mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/.whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
timeout "${CHECK_TIMEOUT_S:-540}" python3 .gpu/gpu_check.py .gpu "$OUT" "$@" 2>"$OUT/stderr.txt" | grep '^{' | cut -c1-1500
echo "exit ${PIPESTATUS[0]}"
tail -c 3000 "$OUT/stderr.txt"
