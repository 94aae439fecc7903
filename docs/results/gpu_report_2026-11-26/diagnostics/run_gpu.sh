#!/bin/bash
# One device call: install, report within its budget, pack everything into $OUT.
set -o pipefail
export PYTHONUNBUFFERED=1
t0=$(date +%s)
python3 -m pip install -q --no-index --find-links .wheelhouse 'jsonargparse[signatures]' faster-coco-eval fla-core einops \
 && python3 -m pip install -q --no-index --find-links .wheelhouse --no-deps mlxtend \
 && python3 -m pip install -q --no-deps --no-build-isolation -e . || { echo INSTALL FAILED; exit 3; }
echo "installed in $(( $(date +%s) - t0 )) s"
nvidia-smi -L; python3 -c "import torch, triton, fla; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())" 2>&1 | tail -1
export TRITON_PRINT_AUTOTUNING=1
mkdir -p /tmp/gr
timeout -s KILL "${REPORT_KILL_S:-520}" python3 -m lab.benchmark gpu-report \
  --budget-minutes "${BUDGET_MIN:-8.4}" --fla-autotune reduced \
  --stages parity latency-bfloat16-tokens anchor model-bfloat16 decode training \
  --out /tmp/gr/report 2>&1 | tee /tmp/gr/stdout.log | grep -v "^Triton autotuning\|best config" | tail -60
echo "report exit $? after $(( $(date +%s) - t0 )) s"
cp /tmp/gr/report/gpu_report.md "$OUT/" 2>/dev/null
tar czf "$OUT/gpu_all.tgz" -C /tmp gr
ls -la "$OUT"
