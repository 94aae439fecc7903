#!/bin/bash
export PYTHONUNBUFFERED=1 ATTN_LIGHTNING_FLA_AUTOTUNE=reduced
python3 -m pip install -q --no-index --find-links .wheelhouse 'jsonargparse[signatures]' faster-coco-eval fla-core einops \
 && python3 -m pip install -q --no-index --find-links .wheelhouse --no-deps mlxtend \
 && python3 -m pip install -q --no-deps --no-build-isolation -e . || { echo INSTALL FAILED; exit 3; }
F='Warn|warn|Triggered|return float|^ *$'
s=$(date +%s)
timeout -s KILL 60 python3 .wheelhouse/diag.py accuracy 2>&1 | grep -Ev "$F" | tee $OUT/accuracy.log
echo "t=$(( $(date +%s)-s ))"
for m in fla torch; do timeout -s KILL 45 python3 .wheelhouse/diag.py nan $m 2>&1 | grep -Ev "$F" | grep -v "^\s*\(at \|File\)" | tail -40 | tee $OUT/nan_$m.log; echo "t=$(( $(date +%s)-s ))"; done
timeout -s KILL 55 python3 .wheelhouse/diag.py speed 2>&1 | grep -Ev "$F" | tee $OUT/speed.log
echo "t=$(( $(date +%s)-s ))"
timeout -s KILL 55 python3 -m pytest tests/attention/test_fla_cuda.py -v -p no:cacheprovider -rfE --tb=line -k "not training_step and not outputs_and_gradients" 2>&1 | grep -E "PASSED|FAILED|ERROR|^E |passed|failed" | tee $OUT/rest.log | tail -30
echo "t=$(( $(date +%s)-s ))"
