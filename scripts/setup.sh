#!/usr/bin/env bash
# Bring a machine to a working hpcgnn install in ./.venv.
#
#   bash scripts/setup.sh          # idempotent: a second run takes seconds
#
# On a Debian/Ubuntu machine where we are root, the system packages (Open MPI,
# parallel HDF5, ParMETIS from Debian's non-free component, METIS) are installed
# with apt.  Elsewhere (a cluster, no root) nothing is installed system-wide: the
# script checks for an MPI compiler wrapper, parallel HDF5 and ParMETIS and, if one
# is missing, says which module to load or which variable to set (MPICC, HDF5_DIR,
# PARMETIS_DIR).  See docs/install.md.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$here"
VENV=${HPCGNN_VENV:-$here/.venv}
PY=${PYTHON:-python3}
TORCH_VERSION=${HPCGNN_TORCH_VERSION:-2.13.0}

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

# slurm-wlm + munge: a real single-node SLURM for tests/e2e/test_slurm.py (its daemons are
# started by the test itself, in a temporary directory; nothing is enabled system-wide)
apt_pkgs="openmpi-bin libopenmpi-dev libhdf5-openmpi-dev libparmetis-dev libmetis-dev pkg-config slurm-wlm munge iproute2"

# ---------------------------------------------------------------------------
# 1. System packages (apt, when we can) or a check of what the cluster provides.
# ---------------------------------------------------------------------------
missing_apt() {
  local p out=""
  for p in $apt_pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || out="$out $p"
  done
  echo "$out"
}

# HPCGNN_SETUP_NO_APT=1 skips apt even as root (containers, site-managed machines).
if [ -z "${HPCGNN_SETUP_NO_APT:-}" ] && command -v apt-get >/dev/null 2>&1 \
   && command -v dpkg-query >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  need=$(missing_apt)
  if [ -n "$need" ]; then
    say "installing Debian packages:$need"
    # ParMETIS lives in Debian's non-free component.
    src=/etc/apt/sources.list.d/debian.sources
    if [ -f "$src" ] && ! grep -qE '^Components:.*non-free( |$)' "$src"; then
      say "enabling the non-free component in $src (for libparmetis-dev)"
      sed -i -E '/^Components:/{/non-free( |$)/! s/$/ non-free/}' "$src"
    elif [ -f /etc/apt/sources.list ] && grep -qE '^deb ' /etc/apt/sources.list \
         && ! grep -qE '^deb .* non-free( |$)' /etc/apt/sources.list; then
      sed -i -E '/^deb /{/ non-free( |$)/! s/$/ non-free/}' /etc/apt/sources.list
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $apt_pkgs >/dev/null
  else
    say "Debian packages present"
  fi
  export MPICC=${MPICC:-mpicc}
  export HDF5_DIR=${HDF5_DIR:-/usr/lib/x86_64-linux-gnu/hdf5/openmpi}
  [ -d "$HDF5_DIR" ] || HDF5_DIR=$(dirname "$(dirname "$(find /usr/lib -path '*hdf5/openmpi/lib/libhdf5.so' 2>/dev/null | head -1)")")
else
  say "not root or no apt: using the MPI, HDF5 and ParMETIS already on this machine"
  problems=""
  MPICC=${MPICC:-$(command -v mpicc || true)}
  [ -n "$MPICC" ] || problems="$problems\n  - no MPI compiler wrapper: 'module load openmpi' (or your MPI), or set MPICC=/path/to/mpicc"
  if [ -z "${HDF5_DIR:-}" ]; then
    if command -v h5pcc >/dev/null 2>&1; then HDF5_DIR=$(dirname "$(dirname "$(command -v h5pcc)")"); fi
  fi
  [ -n "${HDF5_DIR:-}" ] && [ -d "$HDF5_DIR" ] || problems="$problems\n  - no parallel HDF5: 'module load hdf5/parallel' (the MPI build) or set HDF5_DIR to its prefix"
  if [ -z "${PARMETIS_DIR:-}" ]; then
    for d in /usr /usr/local ${CONDA_PREFIX:-}; do [ -f "$d/include/parmetis.h" ] && PARMETIS_DIR=$d && break; done
  fi
  [ -n "${PARMETIS_DIR:-}" ] && [ -f "$PARMETIS_DIR/include/parmetis.h" ] || problems="$problems\n  - no ParMETIS: 'module load parmetis' or set PARMETIS_DIR to the prefix holding include/parmetis.h"
  if [ -n "$problems" ]; then
    printf 'setup: cannot continue, this machine lacks:%b\nsetup: see docs/install.md for a cluster install with environment modules.\n' "$problems" >&2
    exit 1
  fi
  export MPICC HDF5_DIR PARMETIS_DIR
fi

# ---------------------------------------------------------------------------
# 2. The virtual environment.  If torch is already importable (a cluster module,
#    a GPU build), the venv sees the system site-packages and that torch is kept.
# ---------------------------------------------------------------------------
if [ ! -x "$VENV/bin/python" ]; then
  if "$PY" -c 'import torch' >/dev/null 2>&1; then
    say "torch found outside the venv: keeping it (venv with --system-site-packages)"
    "$PY" -m venv --system-site-packages "$VENV"
  else
    "$PY" -m venv "$VENV"
  fi
fi
VPY="$VENV/bin/python"
# (pip prints a warning per missing local index directory on some images; drop those)
pipi() { "$VPY" -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
have() { "$VPY" -c "$1" >/dev/null 2>&1; }

have 'import Cython, pkgconfig, wheel, numpy, mpi4py, setuptools, sys; sys.exit(int(setuptools.__version__.split(".")[0]) < 77)' \
  || pipi --upgrade pip "setuptools>=77" wheel "Cython>=3.0" pkgconfig "numpy>=1.24" "mpi4py>=3.1"

# h5py is compiled against parallel HDF5 (a few minutes on one core) in the
# background while torch and the rest install and ext/ compiles (h5py: --no-deps,
# and hpcgnn below: --no-deps, so neither pip touches the other's packages).
h5py_log="$VENV/.h5py-build.log"
# compile the extensions of h5py and ext/ with every core (setuptools' build_ext -j,
# read from this extra config file): the h5py build is most of a fresh set-up
jobs=$(nproc 2>/dev/null || echo 2)
build_cfg="$VENV/.build-parallel.cfg"
printf '[build_ext]\nparallel = %s\n' "$jobs" >"$build_cfg"
export DIST_EXTRA_CONFIG="$build_cfg"
h5py_pid=""
if ! have 'import h5py, sys; sys.exit(0 if h5py.get_config().mpi else 1)'; then
  say "building h5py against parallel HDF5 in $HDF5_DIR (a few minutes, in the background)"
  # --force-reinstall: a serial h5py already visible (system site-packages) would
  # otherwise satisfy the requirement and nothing would be built
  ( CC="$MPICC" HDF5_MPI=ON HDF5_DIR="$HDF5_DIR" \
      pipi --no-build-isolation --no-binary=h5py --no-cache-dir --force-reinstall --no-deps "h5py>=3.10" ) \
    >"$h5py_log" 2>&1 &
  h5py_pid=$!
fi

if ! have 'import torch'; then
  say "installing torch==$TORCH_VERSION"
  pipi "torch==$TORCH_VERSION"
fi
have 'import torch_geometric, pytest, pytest_mpi, pytest_timeout, scipy, tqdm, matplotlib, pyarrow' \
  || pipi torch_geometric scipy tqdm matplotlib pyarrow pytest pytest-mpi pytest-timeout
# DGL's unsupervised example (examples/dgl/) calls LogisticRegression(multi_class=...), gone in 1.8
have 'import sklearn' || pipi "scikit-learn<1.8"
# KaMinPar: the quality peer of bench/partition_bench.py (a wheel; the benchmark goes without it)
have 'import kaminpar' || pipi kaminpar || say "kaminpar not installed: bench/partition_bench.py leaves its peer out"

# ---------------------------------------------------------------------------
# 3. hpcgnn itself (compiles ext/).  Rebuilt only when a source is newer than
#    the last build.
# ---------------------------------------------------------------------------
stamp="$VENV/.hpcgnn-built"
if [ ! -f "$stamp" ] || [ -n "$(find setup.py pyproject.toml ext -newer "$stamp" -type f 2>/dev/null | head -1)" ] \
   || ! have 'import hpcgnn._ext'; then
  say "building hpcgnn (ext/)"
  CC="$MPICC" pipi --no-build-isolation --no-deps -e .
  touch "$stamp"
fi
if [ -n "$h5py_pid" ]; then
  wait "$h5py_pid" || { cat "$h5py_log" >&2; die "building h5py against $HDF5_DIR failed (log above)"; }
fi
have 'import h5py, sys; sys.exit(0 if h5py.get_config().mpi else 1)' \
  || die "h5py was built without MPI support; is HDF5_DIR=$HDF5_DIR the parallel build?"
have 'import hpcgnn._ext' || die "hpcgnn's compiled extension does not import"
say "ready: source $VENV/bin/activate"
