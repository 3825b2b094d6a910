"""What a training run leaves in its run directory (written by trainer 0):
``log.jsonl`` (one JSON object per epoch and one for the final result),
``metrics.csv`` (the epochs' numbers) and ``curve.png`` (loss and accuracies per
epoch, matplotlib; redrawn at most every ``plot_every_s`` seconds during the run and
at its end, since trainer 0 draws it while the other trainers wait at their next
gradient allreduce: ~1 s the first time, with matplotlib's import)."""
from __future__ import annotations

import csv
import json
import os
import time

from ..errors import InputError
from ..io.diskspace import disk_full


class RunLog:
    def __init__(self, run_dir: str, active: bool, append: bool = False, plot_every_s: float = 60.0,
                 keep_before: int | None = None):
        """``append``: a resumed run; ``keep_before``: the epoch it resumes in, whose
        row and later ones (logged by the interrupted run after its checkpoint) are
        dropped, so that each epoch has one row."""
        self.run_dir, self.active = run_dir, active
        self.plot_every_s = plot_every_s
        self._plotted_at = time.monotonic()
        self._unplotted = False
        self.rows: list[dict] = []
        if active and append:
            path = os.path.join(run_dir, "log.jsonl")
            self.rows = [r for r in _read_jsonl(path) if r.get("kind") == "epoch"
                         and (keep_before is None or r["epoch"] < keep_before)]
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.writelines(json.dumps(r) + "\n" for r in self.rows)
            os.replace(tmp, path)
        elif active:
            for name in ("log.jsonl", "metrics.csv", "curve.png"):
                path = os.path.join(run_dir, name)
                if os.path.exists(path):
                    os.remove(path)

    def epoch(self, row: dict) -> None:
        if not self.active:
            return
        row = {"kind": "epoch", **row}
        self.rows = [r for r in self.rows if r["epoch"] != row["epoch"]] + [row]
        self._append(row)
        self._csv()
        self._unplotted = True
        if time.monotonic() - self._plotted_at >= self.plot_every_s:
            self.flush()

    def flush(self) -> None:
        """Draw ``curve.png`` now if epochs were logged since the last drawing."""
        if self.active and self._unplotted and self.rows:
            self._plot()
            self._plotted_at, self._unplotted = time.monotonic(), False

    def final(self, row: dict) -> None:
        if self.active:
            self._append({"kind": "final", **row})
            self.flush()

    def _append(self, row: dict) -> None:
        path = os.path.join(self.run_dir, "log.jsonl")
        try:
            with open(path, "a") as f:
                f.write(json.dumps(row) + "\n")
        except OSError as e:
            raise _unwritable(path, e) from None

    def _csv(self) -> None:
        keys = list(dict.fromkeys(k for r in self.rows for k in r if k != "kind"))    # every row's columns
        tmp = os.path.join(self.run_dir, "metrics.csv.tmp")
        try:
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
                w.writeheader()
                w.writerows(self.rows)
            os.replace(tmp, os.path.join(self.run_dir, "metrics.csv"))
        except OSError as e:
            raise _unwritable(tmp, e) from None

    def _plot(self) -> None:
        try:
            import matplotlib   # only when the learning curve is drawn (start-up cost)

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt   # only when the learning curve is drawn (start-up cost)
        except ImportError:          # the plot is a convenience; the CSV has the numbers
            return
        ep = [r["epoch"] for r in self.rows]
        fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
        a.plot(ep, [r["loss"] for r in self.rows], marker="o")
        a.set_xlabel("epoch")
        a.set_ylabel("training loss")
        for key in ("train_acc", "val_acc"):
            pts = [(r["epoch"], r[key]) for r in self.rows if r.get(key) is not None]
            if pts:
                b.plot(*zip(*pts), marker="o", label=key)
        b.set_xlabel("epoch")
        b.set_ylabel("accuracy")
        b.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(self.run_dir, "curve.png"), dpi=100)
        plt.close(fig)


def _unwritable(path: str, e: OSError) -> InputError:
    """The one-line error of a run-log file that cannot be written (trainer 0 alone
    writes them: the failure hook ends the job with this line)."""
    full = "; disk full" if disk_full(e) else ""
    return InputError(f"{path}: cannot write the run log on trainer 0: {e.strerror or e}{full}")


def _read_jsonl(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(ln) for ln in f if ln.strip()]
