#!/usr/bin/env bash
# Run hpcgnn's whole test suite: once in one process (unit tests and the MPI tests
# that fit one rank), then under mpirun at 2, 3 and 4 ranks (the multi-rank tests).
#
#   bash scripts/test.sh             # everything
#   bash scripts/test.sh --quick     # a change's first check: tests not marked slow, 1 process and 2 ranks
#   bash scripts/test.sh -k parmetis # extra pytest arguments are passed on
#   HPCGNN_TEST_RANKS="2 4" bash scripts/test.sh   # the rank counts of the multi-rank runs ("2 3 4")
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
PY=${HPCGNN_VENV:-$here/.venv}/bin/python
[ -x "$PY" ] || { echo "test: no venv at .venv; run: bash scripts/setup.sh" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export PYTHONUNBUFFERED=1
out=$(mktemp -d "${TMPDIR:-/tmp}/hpcgnn-tests.XXXXXX")
RANKS=${HPCGNN_TEST_RANKS:-"2 3 4"}
status=0
quick=0
if [ "${1:-}" = "--quick" ]; then quick=1; shift; fi

if [ $quick -eq 1 ]; then
  # no test that starts a job of its own (tests/conftest.py fails an unmarked one)
  echo "=== quick, 1 process: tests not marked slow ==="
  "$PY" -m pytest --with-mpi -p no:cacheprovider -q -m "not slow" --junitxml="$out/np1.xml" "$@" tests || status=1
  RANKS=2 mark="mpi and not slow"
else
  echo "=== 1 process: all tests ==="
  : >"$out/launches.log"
  HPCGNN_TEST_LAUNCH_LOG="$out/launches.log" \
    "$PY" -m pytest --with-mpi -p no:cacheprovider --junitxml="$out/np1.xml" "$@" tests || status=1
  # the child launches of the whole pass, held under their limit (not counted for a part of it)
  if [ $# -eq 0 ]; then "$PY" tests/launch_count.py "$out/launches.log" || status=1; fi
  mark=mpi
fi

for n in $RANKS; do
  echo "=== mpirun -n $n: multi-rank tests ==="
  # --timeout: a deadlock that escaped pytest-timeout still ends the run
  # Only rank 0 writes the junit report; every rank's output goes to its own file.
  mpirun --oversubscribe --timeout 1200 -n "$n" --output-filename "$out/np$n" \
    "$PY" -m pytest --with-mpi -m "$mark" -q --color=no -p no:cacheprovider \
    -o junit_suite_name="np$n" --junitxml="$out/np$n.xml" "$@" tests >"$out/np$n.log" 2>&1
  rc=$?
  first=$(find "$out/np$n" -path '*rank.0*' -name stdout | head -1)
  [ -n "$first" ] && grep -aE "passed|failed|error" "$first" | tail -n 2
  if [ $rc -ne 0 ]; then
    status=1
    echo "--- mpirun -n $n failed (exit $rc); output of every rank:"
    for f in $(find "$out/np$n" -name stdout -o -name stderr | sort); do
      [ -s "$f" ] && { echo "--- $f"; grep -av "^$" "$f" | tail -n 80; }
    done
    tail -n 20 "$out/np$n.log"
  fi
done

# One closing line over every run (rank 0's report of each mpirun).
"$PY" - "$out" <<'PYEOF'
import sys, glob, xml.etree.ElementTree as ET
p = f = s = 0
for path in sorted(glob.glob(sys.argv[1] + "/np*.xml")):
    try:
        root = ET.parse(path).getroot()
    except Exception:
        continue
    for suite in root.iter("testsuite"):
        t, e, fl, sk = (int(suite.get(k, 0)) for k in ("tests", "errors", "failures", "skipped"))
        p += t - e - fl - sk; f += e + fl; s += sk
print(f"{p} passed, {f} failed, {s} skipped")
PYEOF
[ $status -eq 0 ] && echo "all test runs passed" || echo "some test run failed"
exit $status
