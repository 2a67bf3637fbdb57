#!/usr/bin/env bash
# Runs the GPU checks on the device machine (H200, torch 2.11) in one call and
# writes logs and a summary under $OUT.  Usage (from the repo root):
#   bash tests/gpu/run_on_device.sh [family] [errors] [repro] [liger085] [jsdkl085] [weights085] [modes085] [liger081]
#                                   [accumulate] [scale] [parity] [loop] [ligersuite[-jsd|-kl]] [losses] [name='shell command'...]
# The device allows 600 s a call: pick steps that fit.  Steps of one call may run side by
# side with OUT=<a folder of their own> each (the summary is per OUT).  At most 8 files
# come back from a call's $OUT (no deeper than two folders): a call of many steps ends
# with one archive, e.g. `tar czf $OUT/all.tgz -C $OUT --exclude all.tgz .`, or prints
# what it needs.
#   scale       tests/gpu/test_scale_in_place_cuda.py: the in-place product kernel of Liger's traced backward
#               against the pointwise product, bit for bit, and at 1.0
#   accumulate  tests/gpu/test_accumulate_kernel_cuda.py: the Hopper accumulate kernel against cuBLAS and
#               float64, compiled chains through it (CUDA graphs, symbolic sizes)
#   parity      scripts/opinfo_parity.py on CUDA: PyTorch's samples of the matmul family, slices and views
#               (bf16, every sample, static and dynamic, gradients) with and without the package
#   loop        tests/gpu/test_liger_training_loop.py over $LOOP_WORKERS workers (pytest-xdist,
#               default 6); one JSON line per case in $OUT/loop.jsonl (python scripts/loop_table.py
#               renders it); LOOP_FEATURES=<spec> runs it with those features (e.g. -accumulate_pairs)
#   analysis    tests/gpu/test_triton_analysis_cuda.py: Liger's cross-entropy kernel with class weights and
#               softcap compiled, analysed without a traceback, only its outputs copied
#   hf          tests/gpu/test_hf_liger_models.py with Liger 0.8.5 (Llama, Qwen 2, Gemma 2 from configs;
#               compiled model and whole step vs eager; Trainer) over $HF_WORKERS workers (default 7);
#               one JSON line per case in $OUT/hf.jsonl
#   hfnightly   the same with liger-kernel-nightly (.whl/liger_kernel_nightly-*.whl); $OUT/hfnightly.jsonl
#   compiletime benchmarks/compile_time.py (COMPILE_ARGS, default: the small-H model and the Llama-3-8B
#               head, static and changing lengths); its table in $OUT/compiletime.log, JSON in $OUT/compiletime.json
#   ligerhead   tests/gpu/test_liger_head_cuda.py: Liger's forward as the package's op with changing lengths and
#               every option, bit for bit against eager
#   trainingrun benchmarks/compile_time.py --run (RUN_ARGS, default: the small-H model and the Llama-3-8B head,
#               model compiled, heads eager, ce, liger, liger-opaque); table in $OUT/trainingrun.log
#   ligersuite  Liger 0.8.5's own FLCE test file (from .whl/liger_kernel-0.8.5.tar.gz) with
#               one compiled FLCE Function per worker (tests/gpu/liger_compiled_plugin.py);
#               LIGER_WORKERS (default 4) workers, LIGER_TIMEOUT (default 560) seconds;
#               ligersuite-jsd, ligersuite-kl: the same for its fused linear JSD and KL-div files;
#               LIGER_VERSION=nightly runs the nightly's files (.whl/liger_kernel_nightly-*.tar.gz) on the nightly
#   floattypes    tests/gpu/test_triton_float_types_cuda.py: a user kernel whose loop-carried value takes a
#               float argument's type compiles, and matches eager bit for bit
#   jsdmem      benchmarks/liger_losses.py's JSD accum None row (llama, static, loop) with every feature,
#               without accumulate_pairs, and with Inductor's reorder_for_peak_memory off
#   losses      benchmarks/liger_losses.py (LOSSES_ARGS, default --quick --time-limit 500): Liger's
#               FLCE options, JSD, KL-div compiled vs eager; JSON in $OUT/losses.json
#   distill     JSD and KL-div under the default setting: both heads, static and automatic graphs, accum
#               fp32 and None (their op; the static rows of a 4- to 32-chunk loop, Llama's JSD and Qwen's
#               KL-div, promoted to the compiled loop); JSON in $OUT/distill-auto.json
#   memest      benchmarks/flce_shapes.py on the Llama-3-8B head (static and automatic, accum fp32 and
#               None), each row also without memory_estimate: the feature's cost in speed, if any
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-cache
export PYTHONPATH="$PWD:$PWD/tests:/tmp/site-0.8.5"
summary="$OUT/summary.txt"; : > "$summary"
install_liger() {  # $1 = version, or "nightly"; once per machine (steps of parallel calls share it)
  [ -d /tmp/site-$1/liger_kernel ] && return
  rm -rf /tmp/site-$1
  local wheel=.whl/liger_kernel-$1-*.whl
  [ "$1" = nightly ] && wheel=.whl/liger_kernel_nightly-*.whl
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site-$1 $wheel
}
hf_step() {  # $1 = step name, $2 = Liger version (a /tmp/site-<version>)
  install_liger $2
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_RESULTS="$OUT/$1.jsonl" PYTHONPATH="${PYTHONPATH//site-0.8.5/site-$2}" \
    step $1 ${HF_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider -n ${HF_WORKERS:-7} -rfE tests/gpu/test_hf_liger_models.py --tb=short
}
step() {  # name, timeout, command...
  local name=$1 t=$2; shift 2
  local start=$(date +%s)
  timeout "$t" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - start ))s :: $(grep -E '^Result:|passed|failed|error' "$OUT/$name.log" | tail -n 2 | tr '\n' ' ')" | tee -a "$summary"
}
install_liger 0.8.5  # default Liger for benchmarks and extra commands
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, torch.cuda.get_device_name())' | tee -a "$summary"
for what in "$@"; do
  case "$what" in
    family) step family 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_cuda_family.py --maxfail=40 --tb=line ;;
    repro)
      install_liger 0.8.5
      step repro-addmm-without 300 python3 repro/flce_addmm_out_dtype.py --without-plugin --no-liger
      step repro-addmm-with 300 python3 repro/flce_addmm_out_dtype.py --no-liger
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step repro-liger-without 300 python3 repro/flce_addmm_out_dtype.py --without-plugin
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step repro-liger-with 300 python3 repro/flce_addmm_out_dtype.py ;;
    loop) install_liger 0.8.5
      LOOP_RESULTS="$OUT/loop.jsonl" PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step loop ${LOOP_TIMEOUT:-560} python3 -m pytest -q -p no:cacheprovider -n ${LOOP_WORKERS:-6} -k "${LOOP_K:-}" -rfE tests/gpu/test_liger_training_loop.py --tb=short ;;
    analysis) install_liger 0.8.5
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step analysis 200 python3 -m pytest -q -p no:cacheprovider -rA tests/gpu/test_triton_analysis_cuda.py --tb=short ;;
    hf) hf_step hf 0.8.5 ;;
    hfnightly) hf_step hfnightly nightly ;;
    compiletime) install_liger 0.8.5
      step compiletime ${COMPILE_TIMEOUT:-420} python3 benchmarks/compile_time.py --json "$OUT/compiletime.json" ${COMPILE_ARGS:-} ;;
    ligerhead) install_liger 0.8.5
      step ligerhead ${LIGERHEAD_TIMEOUT:-420} python3 -m pytest -q -p no:cacheprovider tests/gpu/test_liger_head_cuda.py --tb=short ;;
    trainingrun) install_liger 0.8.5
      step trainingrun ${RUN_TIMEOUT:-560} python3 benchmarks/compile_time.py --run --json "$OUT/trainingrun.json" \
        ${RUN_ARGS:---models small-h,llama3-8b-head --compile model --timeout 240} ;;
    ligersuite|ligersuite-jsd|ligersuite-kl) v=${LIGER_VERSION:-0.8.5}; install_liger $v
      src=.whl/liger_kernel-$v.tar.gz; [ "$v" = nightly ] && src=$(ls .whl/liger_kernel_nightly-*.tar.gz)
      [ -d /tmp/liger-src-$v/test ] || { mkdir -p /tmp/liger-src-$v && tar xzf $src -C /tmp/liger-src-$v --strip-components=1; }
      case "$what" in ligersuite) fn=flce; file=cross_entropy ;; ligersuite-jsd) fn=jsd; file=jsd ;; *) fn=kl_div; file=kl_div ;; esac
      (cd /tmp/liger-src-$v && LIGER_COUNTS="$OUT/$what-$v-counts" LIGER_COMPILED=$fn PYTHONPATH="$OLDPWD:$OLDPWD/tests/gpu:/tmp/site-$v:/tmp/liger-src-$v" step $what-$v ${LIGER_TIMEOUT:-560} python3 -m pytest -q -p no:cacheprovider -n ${LIGER_WORKERS:-4} -p liger_compiled_plugin -rfE --timeout 200 test/transformers/test_fused_linear_$file.py --tb=short) ;;
    losses) install_liger 0.8.5
      PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" step losses ${LOSSES_TIMEOUT:-560} python3 benchmarks/liger_losses.py ${LOSSES_ARGS:---quick --time-limit 500} --json "$OUT/losses.json" ;;
    jsdmem) install_liger 0.8.5  # where the JSD loop's extra memory comes from (docs/gpu-results.md, the CPU proxy)
      for variant in "all" "-accumulate_pairs" "all reorder_for_peak_memory=False"; do
        read -r feats config <<< "$variant"; extra=${config:+--inductor $config}
        INDUCTOR_ADDMM_FIX=$feats PYTHONPATH="$PYTHONPATH:$PWD/benchmarks" step "jsdmem-${variant// /-}" 200 python3 benchmarks/liger_losses.py \
          --losses jsd:None-beta0.5 --heads llama3-8b --graphs static --head-settings loop --reps 6 --warmup 2 $extra
      done ;;
    distill) install_liger 0.8.5
      step distill-auto ${DISTILL_TIMEOUT:-360} python3 benchmarks/liger_losses.py --losses jsd:fp32-beta0.5 jsd:None-beta0.5 kl:fp32 kl:None \
        --heads llama3-8b qwen2.5-0.5b --graphs static automatic --reps 8 --warmup 3 --json "$OUT/distill-auto.json" ;;
    memest) step memest 500 python3 benchmarks/flce_shapes.py --case llama3-8b:8192 --graphs static automatic \
        --accum fp32 None --also=-memory_estimate --json "$OUT/memest.json" ;;
    floattypes) step floattypes 200 python3 -m pytest -q -p no:cacheprovider -rA tests/gpu/test_triton_float_types_cuda.py --tb=short ;;
    scale) step scale 200 python3 -m pytest -q -p no:cacheprovider -rA tests/gpu/test_scale_in_place_cuda.py --tb=short ;;
    accumulate) step accumulate 300 python3 -m pytest -q -p no:cacheprovider -rA tests/gpu/test_accumulate_kernel_cuda.py --tb=short ;;
    parity)  # torch's OpInfo database imports expecttest: carry its wheel in .whl/
      [ -d /tmp/site-expecttest ] || python3 -m pip install -q --no-index --no-deps --target /tmp/site-expecttest .whl/expecttest-*.whl
      PYTHONPATH="$PYTHONPATH:/tmp/site-expecttest" step parity ${PARITY_TIMEOUT:-540} python3 scripts/opinfo_parity.py --device cuda \
        --dtype bfloat16 --ops looked-at --samples 0 --grad --jobs ${PARITY_JOBS:-8} --out "$OUT/parity" ;;
    errors) step error-parity 150 python3 -m pytest -q -s -p no:cacheprovider -rA tests/gpu/test_error_parity_cuda.py --tb=short ;;
    liger085) install_liger 0.8.5
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step liger-0.8.5 420 python3 -m pytest -q -s -p no:cacheprovider -rA tests/gpu/test_liger_flce.py -m "not class_weights" -k "not compile_modes" --tb=short ;;
    jsdkl085) install_liger 0.8.5
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step jsd-kl-0.8.5 200 python3 -m pytest -q -s -p no:cacheprovider -rA tests/gpu/test_liger_flce.py -k "jsd or kl_div" --tb=short ;;
    modes085) install_liger 0.8.5
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step modes-0.8.5 540 python3 -m pytest -q -s -p no:cacheprovider -rA --timeout=200 tests/gpu/test_liger_flce.py -k "compile_modes" --tb=short ;;
    weights085) install_liger 0.8.5
      PYTHONPATH="$PYTHONPATH:/tmp/site-0.8.5" step class-weights-0.8.5 300 python3 -m pytest -q -p no:cacheprovider -rA tests/gpu/test_liger_flce.py -m class_weights --tb=short ;;
    liger081) install_liger 0.8.1
      PYTHONPATH="${PYTHONPATH//site-0.8.5/site-0.8.1}" step liger-0.8.1 420 python3 -m pytest -q -s -p no:cacheprovider -rA tests/gpu/test_liger_flce.py -m "not class_weights" -k "${K081:-not compile_modes}" --tb=short ;;
    *=*) step "${what%%=*}" 540 bash -c "${what#*=}" ;;
    *) echo "unknown step $what" | tee -a "$summary" ;;
  esac
done
cat "$summary"
