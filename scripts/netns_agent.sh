#!/bin/bash
# Open MPI's rsh agent for the multi-host test bed (tests/hosts.py, docs/testbed.md):
# instead of logging in with ssh, enter the test-bed host's namespaces (network, UTS,
# mount, IPC) and run the command there.
#
#   mpirun --mca plm_rsh_agent /path/to/scripts/netns_agent.sh --host 10.123.0.2:2,10.123.0.3:2 ...
#   scripts/netns_agent.sh 10.123.0.2 hostname         # by hand: a command on host 0
#
# Called as ssh would be: `agent [ssh options] HOST COMMAND...`; the words of COMMAND
# are joined with spaces and run by `sh -c`, as ssh's remote shell would. HOST is a
# host's address or name; $HPCGNN_TESTBED_DIR/hosts/HOST (default /run/hpcgnn-testbed)
# holds the pid of the process that keeps the host's namespaces. The environment
# passes through unchanged (what a shared home and module setup give on a cluster).
set -u
state=${HPCGNN_TESTBED_DIR:-/run/hpcgnn-testbed}
while [ $# -gt 0 ]; do
  case $1 in
    -[bcDEeFIiJLlmOoQRSWw]) shift 2 ;;     # ssh options that take a value
    --) shift; break ;;
    -*) shift ;;
    *) break ;;
  esac
done
if [ $# -lt 1 ]; then
  echo "netns_agent: usage: netns_agent.sh [options] HOST [COMMAND...]" >&2
  exit 255
fi
host=$1
shift
pid=$(cat "$state/hosts/$host" 2>/dev/null) || {
  echo "netns_agent: no test-bed host '$host' (no $state/hosts/$host; is a test bed up?)" >&2
  exit 255
}
# the pid must still be that host's namespace holder, not a recycled one
if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q '^hpcgnn-testbed-holder-'; then
  echo "netns_agent: test-bed host '$host': holder process $pid is gone" >&2
  exit 255
fi
if [ $# -eq 0 ]; then
  set -- /bin/sh -l            # no command: a shell on the host, as `ssh HOST` gives
else
  set -- /bin/sh -c "$*"
fi
exec nsenter -t "$pid" --net --uts --ipc --mount --wd=/ -- "$@"
