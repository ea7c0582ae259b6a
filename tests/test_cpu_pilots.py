"""The pilots' order on the CPU: `gap-pilot --standing` names the pilot to train now, and
campaign/scripts/cpu_pilots.sh trains whatever it names until the order ends."""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_gap_pilot import _found

from campaign import budget, pilot_overview
from rpevit.lab.result import results
from rpevit.lab.store import catalog

ROOT = Path(__file__).resolve().parents[1]


def test_the_order_stands_at_the_first_pilot_without_a_final_no_go(monkeypatch):
    """First pilot open: it; first NO-GO with its runs done: the next; a GO or the end of the order: none."""
    monkeypatch.setattr(budget, "training_hours", lambda *args, **kwargs: (0.0, 0.0))  # budgets not spent
    no_go, go = _found(-1.0, -0.5), _found(-2.0, -0.5)

    def records(first, later=()):
        monkeypatch.setattr(
            catalog,
            "study_records",
            lambda params, reports_root=None: results(first if params.name == "canvas_gap_pilot" else list(later)),
        )

    records(no_go[:-1])  # one run of the 40×40 pilot still missing
    assert pilot_overview.standing_pilot() == "canvas_gap_pilot"
    records(no_go)
    assert pilot_overview.standing_pilot() == "canvas56_gap_pilot"
    records(go)
    assert pilot_overview.standing_pilot() is None
    # every pilot NO-GO: each reads the 40×40 pilot's finished NO-GO records (the dials' grids are smaller,
    # so only check that the order walks to its end and stops)
    monkeypatch.setattr(pilot_overview.gap_pilot, "final_verdict", lambda preset, reports_root=None: "NO-GO")
    assert pilot_overview.standing_pilot() is None


FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for `python -m rpevit …`: answers --standing from the queue file, logs every study
if [ "$3" = "gap-pilot" ]; then
  [ "$(head -n 1 "$QUEUE")" != FAIL ] || { echo "error: unreadable records" >&2; exit 2; }
  head -n 1 "$QUEUE"
elif [ "$3" = "study" ]; then
  echo "study $4 ${@:5}" >> "$LOG"
  tail -n +2 "$QUEUE" > "$QUEUE.rest" && mv "$QUEUE.rest" "$QUEUE"  # the pilot ends once studied
fi
"""


def test_the_cpu_runner_trains_the_standing_pilot_until_the_order_ends(tmp_path):
    """Each pilot the order stands at is studied once, with the extra arguments, and the loop ends when
    --standing prints nothing; a pilot still standing after its study (runs in the other runner) is
    asked about again after the wait."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    queue, log = tmp_path / "queue", tmp_path / "log"
    queue.write_text("canvas56_gap_pilot\ncanvas56_dial16\n\n")
    env = {"PATH": "/usr/bin:/bin", "PYTHON": str(fake), "QUEUE": str(queue), "LOG": str(log), "WAIT_SECONDS": "0"}
    done = subprocess.run(
        ["bash", str(ROOT / "campaign" / "scripts" / "cpu_pilots.sh"), "--capture-only", "favor"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == [
        "study canvas56_gap_pilot --no-progress --capture-only favor",
        "study canvas56_dial16 --no-progress --capture-only favor",
    ]
    assert "the pilots' order has ended" in done.stdout
    queue.write_text("FAIL\n")  # --standing fails: the runner stops with it instead of calling the order ended
    failed = subprocess.run(
        ["bash", str(ROOT / "campaign" / "scripts" / "cpu_pilots.sh")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert failed.returncode == 2 and "order has ended" not in failed.stdout
    # a pilot whose last run trains elsewhere stays standing after its study: asked again, studied again
    fake.write_text(FAKE_PYTHON.replace('tail -n +2 "$QUEUE"', 'sed "1{/dial16/!d}" "$QUEUE"'))
    queue.write_text("canvas56_dial16\n")
    log.unlink()
    env["WAIT_SECONDS"] = "0"
    stuck = subprocess.Popen(["bash", str(ROOT / "campaign" / "scripts" / "cpu_pilots.sh")], cwd=tmp_path, env=env)
    try:
        stuck.wait(timeout=3)
    except subprocess.TimeoutExpired:
        pass
    finally:
        stuck.kill()
    assert log.read_text().count("study canvas56_dial16 --no-progress") >= 2
