#!/usr/bin/env bash
# benchmarks/flce_shapes.py on the device machine within one call: first every case's
# compiles in parallel (one process per case, one repetition: fills Inductor's and
# Triton's on-disk caches), then the cases one after the other, timed alone on the GPU
# (their compiles now served from those caches).  Each case is a quoted argument list
# for flce_shapes.py; rows are printed as they complete, to $OUT/<n>.log (each row also
# as a "# row: {json}" line); the compile runs' last lines go to $OUT/compile.txt.
#   OUT=$OUT BUDGET_S=540 bash benchmarks/flce_shapes_on_device.sh "--case llama3-8b:8192" "--case gemma2-2b:8192 --graphs static automatic"
# PHASES="compile" or "time" runs one of the two (default both), so that other work can
# share the GPU with the compiles only.
# Needs liger-kernel: .whl/liger_kernel-*.whl (carried) is installed into /tmp/site.
set -u
PHASES=${PHASES:-compile time}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET_S=${BUDGET_S:-540}; deadline=$(( $(date +%s) + BUDGET_S ))
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
[ -d /tmp/site/liger_kernel ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/liger_kernel-0.8.5-*.whl
export PYTHONPATH="$PWD:$PWD/benchmarks:/tmp/site"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())' | tee "$OUT/env.txt"
n=0; pids=()
[[ $PHASES == *compile* ]] && for case in "$@"; do
  n=$((n + 1))
  # shellcheck disable=SC2086  # a case is an argument list
  timeout $(( (deadline - $(date +%s)) * 45 / 100 )) python3 benchmarks/flce_shapes.py $case --warmup 0 --reps 1 > "/tmp/compile-$n.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid"; done
if [[ $PHASES == *compile* ]]; then
  for ((k = 1; k <= n; k++)); do echo "== compile run $k"; grep -v '^# row' "/tmp/compile-$k.log" | tail -n 8; done > "$OUT/compile.txt"
  echo "compiles done after $(( BUDGET_S - (deadline - $(date +%s)) )) s" | tee -a "$OUT/env.txt"
fi
n=0
[[ $PHASES == *time* ]] && for case in "$@"; do
  n=$((n + 1)); left=$(( deadline - $(date +%s) ))
  [ "$left" -gt 20 ] || { echo "case $n not run: no time left" | tee -a "$OUT/env.txt"; continue; }
  # shellcheck disable=SC2086
  timeout "$left" python3 benchmarks/flce_shapes.py $case --profile > "$OUT/$n.log" 2>&1
  echo "case $n ($case) rc=$? $(grep -c '^# row' "$OUT/$n.log") rows" | tee -a "$OUT/env.txt"
done
