"""The one progress display of a study, for both engines: a line per event (done / running / failed
as they change, with an ETA from the runs done so far), or a tqdm bar on a terminal."""

from __future__ import annotations

import time


def label(dataset: str, variant: str, seed: int) -> str:
    return f"{variant} on {dataset}, seed {seed}"


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def duration(seconds: float) -> str:
    """minutes(), or hours from two hours on."""
    return f"{seconds / 3600:.1f} h" if seconds >= 7200 else minutes(seconds)


class Progress:
    """Done / running / failed as they change: one line per event, or a tqdm bar on a terminal.
    `on_event(dict)` is called for every event (kind, dataset, variant, seed, message, host, pid, …)."""

    def __init__(self, todo: int, tty: bool = False, on_event=None, name: str = "study", wanted=None):
        self.todo, self.on_event, self.started = todo, on_event, time.perf_counter()
        # a designed study: () -> (the runs its design wants now, their expected seconds one after another
        # at the finished runs' pace, or None where some have no pace to go on)
        self.wanted = wanted
        self.done = self.failed = self.diverged = self.skipped = 0
        self.running: dict = {}  # run -> (host, pid)
        self.bar = None
        if tty and todo:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=todo, unit="run", desc=name, dynamic_ncols=True)
            self._refresh()

    def _counts(self) -> str:
        extra = "".join(f", {n} {what}" for n, what in ((self.diverged, "diverged"), (self.skipped, "skipped")) if n)
        return f"{self.done + self.diverged}/{self.todo} done, {len(self.running)} running, {self.failed} failed{extra}"

    def _eta(self) -> str:
        """A designed study: the runs its design wants now (the stopping rule may add seeds), at the
        finished runs' pace (time_limit.expected_seconds, the estimate `status` prints). Otherwise, or
        where that pace is missing: mean time of the runs this process trained × the runs left. A
        skipped run (another process trains it) is neither a timing sample nor left: counting its ~0 s
        would shrink the estimate."""
        trained = self.done + self.diverged + self.failed
        left, expected = (self.todo - trained - self.skipped, None) if self.wanted is None else self.wanted()
        if left <= 0:
            return ""
        if expected is not None:
            return (
                f"; ETA {duration(expected)} for the {left} runs the design wants now, one after another at the "
                "finished runs' pace"
            )
        if not trained:
            return ""
        elapsed = time.perf_counter() - self.started
        what = "the remaining runs" if self.wanted is None else f"the {left} runs the design wants now"
        return f"; ETA {duration(elapsed / trained * left)} for {what}"

    def _refresh(self) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{len(self.running)} running, {self.failed} failed", refresh=True)

    def _say(self, text: str, important: bool = False) -> None:
        if self.bar is None:
            print(f"[{self._counts()}] {text}", flush=True)
        elif important:
            self.bar.write(text)

    def ended(self, run) -> None:
        """The run's task returned (its outcome is reported when its result is collected)."""
        self.running.pop(run, None)
        self._refresh()

    def event(self, kind: str, run, message: str = "", **info) -> None:
        """running (host, pid, attempt) | done | diverged | failed | skipped, for run (dataset, variant, seed)."""
        name = label(*run)
        if kind == "running":
            self.running[run] = (info.get("host"), info.get("pid"))
            where = f" (host {info['host']}, pid {info['pid']})" if info.get("host") else ""
            if info.get("attempt", 1) > 1:
                self._say(
                    f"running again, attempt {info['attempt']}: {name}{where}; its previous worker died, "
                    "resuming from its last checkpoint",
                    important=True,
                )
            else:
                self._say(f"running: {name}{where}{self._eta()}")
        else:
            self.running.pop(run, None)
            if kind in ("done", "diverged"):
                setattr(self, kind, getattr(self, kind) + 1)
            else:
                self.failed += kind == "failed"
                self.skipped += kind == "skipped"
            if self.bar is not None:
                self.bar.update(1)
            self._say(f"{kind}: {name}{' — ' + message if message else ''}", important=kind != "done")
        self._refresh()
        if self.on_event is not None:
            self.on_event(
                {"kind": kind, "dataset": run[0], "variant": run[1], "seed": run[2], "message": message, **info}
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
