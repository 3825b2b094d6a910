"""How many child ``mpirun`` launches the one-process pass of the suite made, by test
file, held under :data:`LIMIT` (issue 41: at most 40).  ``scripts/test.sh`` runs it
after that pass on the log ``tests/conftest.py`` writes (``HPCGNN_TEST_LAUNCH_LOG``):

    python tests/launch_count.py LOG         # prints the counts; exit 1 over the limit

The limit only goes down: lower it whenever launches are merged, so the count cannot
creep back.
"""
import collections
import sys

#: the most child launches the full one-process pass may make (target: 40; 133 when counting
#: began, 2026-11-28)
LIMIT = 40


def main(path: str) -> int:
    try:
        with open(path) as f:
            tests = [ln.split("\t", 1)[0] for ln in f if "\t" in ln]
    except FileNotFoundError:
        tests = []
    by_file = collections.Counter(t.split("::", 1)[0] for t in tests)
    for name, count in sorted(by_file.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{count:4d}  {name}")
    print(f"child mpirun launches: {len(tests)} (limit {LIMIT}, target 40)")
    if len(tests) > LIMIT:
        print(f"launch_count: {len(tests)} launches is over the limit of {LIMIT}: merge launches "
              "(one module-scoped run shared by the tests that read it) or test in-process", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
