#!/usr/bin/env bash
# The GPU check in one call of at most 9 minutes (about 5 on an H200), run from the repository root on a machine with
# one CUDA GPU (docs/how-to/multi-gpu.md, 'Checking a GPU'):
#   1. `ptyacc selftest --json`                                   -> $OUT/selftest.json
#   2. the suite's tests that take a device, on CUDA              -> $OUT/pytest.xml
#   3. the demo on CUDA against its CPU result, and compiled       -> $OUT/demo.json
#   4. the race against PtyRAD 1.0 (benchmarks/gpu_race.py)      -> $OUT/race.md, $OUT/race.json
#   5. the race's case profiled, eager and compiled               -> $OUT/profile.json
# and everything printed in $OUT/check.log, the machine in $OUT/env.txt. Each step has its own time
# limit, so that a hang in one leaves the others their time.
#   OUT=/some/folder examples/gpu_check.sh            # on the GPU machine (this workplace's device tool:
#       command "bash examples/gpu_check.sh", carry ["build/gpu_wheels"], timeout_s 540)
#   OUT=/tmp/x PTYRAD_PYTHON=/tmp/venv/bin/python examples/gpu_check.sh --dry-run   # on a CPU: tiny, CPU only
# Wheels in build/gpu_wheels (PtyRAD 1.0 and what the GPU image lacks for it: pydantic and its
# needs) are installed into /tmp/site and seen by PtyRAD's process only; `--wheels`, here (pip and
# PyPI), fetches them for the GPU image's Python 3.12; the device call carries build/gpu_wheels.
set -u
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--wheels" ]; then
    mkdir -p build/gpu_wheels
    exec "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        -d build/gpu_wheels ptyrad==1.0.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 \
        typing-inspection==0.4.5 typing-extensions==4.16.0
fi
OUT=${OUT:-$PWD/gpu_check_out}
mkdir -p "$OUT"
DRY=0
[ "${1:-}" = "--dry-run" ] && DRY=1
PY=${PYTHON:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 MPLBACKEND=Agg
exec > >(tee "$OUT/check.log") 2>&1
started=$(date +%s)
step() { echo "=== $1 ($(( $(date +%s) - started )) s in)"; }
ptyacc() { "$PY" -c 'import sys; from ptyacc.commands.cli import main; sys.exit(main())' "$@"; }

if [ $DRY = 1 ]; then
    DEVICE=cpu; TESTS="tests/test_selftest.py tests/test_syncs.py"; RACE="--tiny --device cpu"; DEMO_SETS="--set optim.iterations=3"
    PTYRAD=${PTYRAD_PYTHON:-$PY}; PROFILE="--tiny --device cpu --batch 12 --iterations 2 --profiled 1"
else
    DEVICE=cuda; DEMO_SETS=""
    TESTS="tests/test_device_agreement.py tests/test_selftest.py tests/test_syncs.py tests/test_hold.py tests/test_batches.py tests/test_descent.py tests/test_compile.py tests/test_checkpoint.py"
    RACE="--device cuda --scan 48 --budget-s 110"  # 2304 positions: the NumPy simulation takes ~20 s of it
    PROFILE="--device cuda --scan 48 --batch 256 --iterations 4 --profiled 1"
    if ls build/gpu_wheels/*.whl >/dev/null 2>&1; then
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site build/gpu_wheels/*.whl
    fi
    printf '#!/bin/sh\nPYTHONPATH=/tmp/site:$PYTHONPATH exec %s "$@"\n' "$PY" > /tmp/ptyrad_python && chmod +x /tmp/ptyrad_python
    PTYRAD=/tmp/ptyrad_python
fi

step "machine"
{ nvidia-smi 2>&1 | head -15; "$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__,
  "cuda", torch.version.cuda, "available", torch.cuda.is_available())'; nproc; } > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step "1. ptyacc selftest"
timeout 110 bash -c "$(declare -f ptyacc); PY=$PY; ptyacc selftest --json '$OUT/selftest.json'"
echo "selftest exit $?"

step "2. the tests that take a device, on $DEVICE"
# -v: one line per test in check.log, which survives the time limit (the XML is written at the end only)
PTYACC_TEST_DEVICE=$DEVICE timeout 130 "$PY" -m pytest -v --tb=short -p no:cacheprovider -m "not slow" -rs \
    --junitxml="$OUT/pytest.xml" $TESTS
echo "pytest exit $?"

step "3. the demo on $DEVICE against the CPU"
for device in cpu $DEVICE; do
    timeout 20 "$PY" -m ptyacc.run configs/demo.yaml --quiet --overwrite --set runtime.device=$device \
        --set output.dir=/tmp/gpu_check_demo_$device --set output.figures=false $DEMO_SETS
    echo "demo on $device exit $?"
done
# the compile's effect: the same demo with the data term's passes compiled (Triton on CUDA)
timeout 90 "$PY" -m ptyacc.run configs/demo.yaml --quiet --overwrite --set runtime.device=$DEVICE \
    --set runtime.compile=true --set output.dir=/tmp/gpu_check_demo_compiled --set output.figures=false $DEMO_SETS
echo "demo on $DEVICE compiled exit $?"
grep -i compil /tmp/gpu_check_demo_compiled/run.log 2>/dev/null | head -5
timeout 15 "$PY" - "$OUT/demo.json" "$DEVICE" <<'EOF'
import json, sys
import numpy as np
from ptyacc.results.h5file import load_results
from ptyacc.speed.selftest import AGREEMENT_RTOL
out, device = sys.argv[1], sys.argv[2]
cpu, dev = (load_results(f"/tmp/gpu_check_demo_{d}/results.h5") for d in ("cpu", device))
rel = lambda a, b: float(np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(np.asarray(b)))
report = {"device": device, "object_relative_difference": rel(dev.object, cpu.object),
          "probe_relative_difference": rel(dev.probe, cpu.probe),
          "final_loss": {"cpu": float(cpu.loss[-1]), device: float(dev.loss[-1])},
          "phase_ncc": float(np.corrcoef(np.ravel(cpu.phase), np.ravel(dev.phase))[0, 1]),
          "s_per_iteration": {"cpu": float(np.median(cpu.iteration_time_s[1:])),
                              device: float(np.median(dev.iteration_time_s[1:]))},
          "tolerance_relative": AGREEMENT_RTOL}
report["within_tolerance"] = report["object_relative_difference"] <= AGREEMENT_RTOL
try:
    comp = load_results("/tmp/gpu_check_demo_compiled/results.h5")
    report["compiled"] = {"object_relative_difference_to_eager": rel(comp.object, dev.object),
                          "s_per_iteration": float(np.median(comp.iteration_time_s[1:])),
                          "first_iteration_s": float(comp.iteration_time_s[0]),
                          "eager_first_iteration_s": float(dev.iteration_time_s[0])}
except (OSError, KeyError) as error:
    report["compiled"] = f"no result: {error}"
json.dump(report, open(out, "w"), indent=1)
print(json.dumps(report))
EOF

step "4. the race against PtyRAD"
timeout 160 "$PY" benchmarks/gpu_race.py /tmp/gpu_check_race $RACE --ptyrad-python "$PTYRAD"
echo "race exit $?"
cp /tmp/gpu_check_race/race.md /tmp/gpu_check_race/race.json "$OUT"/ 2>/dev/null  # written after every run
tail -5 /tmp/gpu_check_race/*.log 2>/dev/null | tail -40  # the runs' own last lines, for a failed one
step "5. where the step's time goes (benchmarks/gpu_profile.py), eager and compiled"
timeout 150 "$PY" benchmarks/gpu_profile.py /tmp/gpu_check_profile $PROFILE --data /tmp/gpu_check_race/race_data.h5
echo "profile exit $?"
cp /tmp/gpu_check_profile/profile.json "$OUT"/ 2>/dev/null
step "done"
