#!/usr/bin/env bash
# The GPU timings of docs/benchmarks.md in one go, on a machine with JAX, PyTorch and transformers
# but no TensorFlow and no network (Keras and keras-hub come along as wheels).
#
#   benchmarks/gpu_suite.sh prepare DIR [DATA]   where TensorFlow and pip are: DIR gets the wheels
#                                                (Python 3.12, x86-64) and DATA: `squad` (the
#                                                SQuAD windows, 0.8 MB; the default) or
#                                                `ablations` (the exported plan, 17 MB)
#   benchmarks/gpu_suite.sh run DIR LOGS [PART]  on the GPU machine; PART is one or more of
#                                                overhead pretrain-mini pretrain-base squad
#                                                attention (default: these, in that order)
#                                                ablations
#
# Each part has its own time limit and writes LOGS/PART.log (and .json) as it goes, so a part
# stopped at its limit still leaves the rows it finished. The SQuAD part starts from
# saved_models/minilm-l6-mlm-nsp (SQUAD_INIT to change it).
#
#   overhead       benchmarks/step_overhead.py at mini, batch 32: kbert's `fit` on JAX and on
#                  PyTorch (eager and compiled) beside HF eager, HF under torch.compile and a
#                  bare compiled step of each framework; float32
#   pretrain-base  benchmarks/pretrain_step.py, base at 256x128 (20 predictions) and 64x512 (80):
#                  kbert on JAX (attention dropout 0.1, and 0: fused cuDNN attention) and on
#                  PyTorch (eager, and torch.compile), keras-hub on JAX and PyTorch, HF; bf16;
#                  the PyTorch rows also print their top kernels (torch.profiler)
#   pretrain-mini  the same at mini, 256x128
#   squad          benchmarks/squad_vs_hf.py: SQuAD v1.1 (18 articles), two epochs per engine
#   attention      benchmarks/attention_gpu.py: the attention paths alone, ms and memory
#   ablations      `kbert experiments ablations --arrays` (docs/ablations.md): the exported
#                  Table 5 plan (`prepare DIR ablations`; ABLATIONS_EXPORT_OPTIONS="--steps 5000"
#                  for a shorter one) in bf16 on JAX; LOGS/ablations is the results folder (its
#                  units/ go on where a later run stops: carry it back and name it in
#                  ABLATIONS_RESULTS); not in the default set
#
# JAX compiles are cached in /tmp/kbert-jax-cache (the same step shapes recur across parts,
# models and fine-tuning seeds).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
WHEELS="keras==3.15.1 keras-hub==0.32.0 namex==0.1.0 optree==0.20.0 kagglehub==1.0.2
        kagglesdk==0.1.28"

case "${1:-}" in
prepare)
  DIR=${2:?usage: gpu_suite.sh prepare DIR}
  mkdir -p "$DIR/wheels"
  # shellcheck disable=SC2086
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$DIR/wheels" $WHEELS \
    || exit 1
  case "${3:-squad}" in
  squad) $PY "$ROOT/benchmarks/squad_vs_hf.py" prepare --output "$DIR/squad" || exit 1 ;;
  ablations) $PY -m kbert experiments ablations --export "$DIR/ablations" \
               --mixed-precision mixed_bfloat16 ${ABLATIONS_EXPORT_OPTIONS:-} || exit 1 ;;
  *) echo "unknown data ${3}: squad or ablations"; exit 2 ;;
  esac
  du -sh "$DIR"
  ;;
run)
  DIR=${2:?usage: gpu_suite.sh run DIR LOGS [PART...]}
  LOGS=${3:?usage: gpu_suite.sh run DIR LOGS [PART...]}
  shift 3
  PARTS=${*:-overhead pretrain-mini pretrain-base squad attention}
  mkdir -p "$LOGS"
  if [ -d "$DIR/wheels" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/kbert-site "$DIR"/wheels/*.whl || exit 1
  fi
  export PYTHONPATH=/tmp/kbert-site:$ROOT PYTHONUNBUFFERED=1 TF_CPP_MIN_LOG_LEVEL=3 \
    HF_HUB_OFFLINE=1 XLA_PYTHON_CLIENT_PREALLOCATE=false \
    JAX_COMPILATION_CACHE_DIR=/tmp/kbert-jax-cache JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0.5
  cd "$ROOT" || exit 1
  { nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    KERAS_BACKEND=jax $PY -c "import sys, jax, torch, keras, transformers; \
print(sys.version.split()[0], 'jax', jax.__version__, 'torch', torch.__version__, \
'keras', keras.__version__, 'transformers', transformers.__version__)"; } 2>&1 | tee "$LOGS/versions.log"
  for part in $PARTS; do
    started=$(date +%s)
    case $part in
    overhead)
      timeout 240 $PY benchmarks/step_overhead.py --configs mini --worker-timeout 100 \
        --rows hf kbert/jax kbert/torch kbert/torch-compiled hf-compile bare-jax bare-torch \
        --json "$LOGS/$part.json" ;;
    pretrain-base)
      timeout 440 $PY benchmarks/pretrain_step.py --configs base --backends jax torch \
        --shapes 256x128x20 64x512x80 --variants attention-dropout-0 compile --warmup 3 \
        --steps 10 --worker-timeout 150 --profile --json "$LOGS/$part.json" ;;
    pretrain-mini)
      timeout 150 $PY benchmarks/pretrain_step.py --configs mini --backends jax torch \
        --shapes 256x128x20 --warmup 3 --steps 10 --worker-timeout 60 \
        --json "$LOGS/$part.json" ;;
    squad)
      timeout 420 $PY benchmarks/squad_vs_hf.py run --bundle "$DIR/squad" \
        --init "${SQUAD_INIT:-saved_models/minilm-l6-mlm-nsp}" --epochs 2 \
        --engines hf kbert-jax kbert-torch hf-longest --json "$LOGS/$part.json" ;;
    attention)
      timeout 150 $PY benchmarks/attention_gpu.py ;;
    ablations)
      if [ -n "${ABLATIONS_RESULTS:-}" ]; then         # a results folder carried back: go on
        mkdir -p "$LOGS/ablations" && cp -r "$ABLATIONS_RESULTS"/. "$LOGS/ablations"/
      fi
      KERAS_BACKEND=jax timeout "${ABLATIONS_TIMEOUT:-560}" $PY -m kbert experiments ablations \
        --output "$LOGS/ablations" --arrays "$DIR/ablations" --work /tmp/kbert-ablations ;;
    *) echo "unknown part $part"; false ;;
    esac 2>&1 | tee "$LOGS/$part.log"
    echo "== $part: exit ${PIPESTATUS[0]}, $(( $(date +%s) - started )) s" \
      | tee -a "$LOGS/summary.log"
  done
  ;;
*)
  sed -n '2,/^set -uo/p' "$0" | sed '$d'
  exit 2
  ;;
esac
