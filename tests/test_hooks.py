"""rpevit.lab.hooks: how a project adds its own rules to a study (a start gate, lines in `status`, its
own report index) without rpevit knowing it — here a stand-in hook object, registered for the test."""

from __future__ import annotations

import types

import pytest

from rpevit.lab import hooks


@pytest.fixture
def hook(monkeypatch):
    """A hook object registered for this test only (the installed campaign's hooks stay, and do nothing for
    the tiny presets)."""
    made = types.SimpleNamespace(
        prepare=lambda params: [f"prepared {params.name}"],
        refusal=lambda params, runs_root=None, reports_root=None: made.why,
        status=lambda params, runs_root=None, reports_root=None: [f"a hook's line for {params.name}"],
        report=lambda params, reports_root=None: made.writes,
        why="",
        writes=False,
    )
    monkeypatch.setattr(hooks, "_REGISTERED", [])
    hooks.register(made)
    hooks.register(made)  # once only
    assert hooks._REGISTERED == [made]
    return made


def test_each_hook_point_asks_every_hook(hook, tiny_params):
    assert hooks.prepare(tiny_params) == ["prepared tiny"]
    assert hooks.refusal(tiny_params) == ""
    hook.why = "the budget is spent"
    assert hooks.refusal(tiny_params) == "the budget is spent"
    assert hooks.status(tiny_params) == ["a hook's line for tiny"]
    assert hooks.report(tiny_params) is False
    hook.writes = True
    assert hooks.report(tiny_params) is True


def test_a_start_gate_stops_unstarted_runs_and_lets_a_started_one_finish(tmp_path, grid_params, capsys):
    """`plain_order` asks each gate before a run starts; a run that holds a checkpoint goes on whatever the
    gate says (a part of a run informs nothing)."""
    from rpevit.lab.schedule.cell import State
    from rpevit.lab.schedule.study import plain_order, started_runs
    from rpevit.lab.store import records
    from rpevit.lab.store.run import Run

    todo = [
        (Run(grid_params, "mnist5k", v, s, runs_root=tmp_path).rooted(), State(train=True))
        for v, s in [("softmax+none", 0), ("softmax+none", 1)]
    ]
    records.save_checkpoint(todo[1][0].dir / records.CHECKPOINT, {"epoch": 1})
    assert [run.seed for run in started_runs(grid_params, runs_root=tmp_path)] == [1]
    asked = []
    gate = lambda run: asked.append(run.seed) or "over the budget"  # noqa: E731
    assert [run.seed for run, _ in plain_order(grid_params, todo, gates=[gate])] == [1]
    assert asked == [0]
    assert "not started: softmax+none on mnist5k, seed 0 (over the budget)" in capsys.readouterr().out
    assert [run.seed for run, _ in plain_order(grid_params, todo)] == [0, 1]  # no gate: both


def test_status_prints_the_hooks_lines_and_a_gate_that_ends_training(hook, tiny_params, roots):
    from rpevit.lab.schedule.status import status_lines

    lines = status_lines(tiny_params)
    assert lines[1] == "a hook's line for tiny" and lines[2].startswith("left: ")
    hook.why = "the budget is spent"
    assert status_lines(tiny_params)[2].endswith("which a start gate refuses: the budget is spent")


def test_the_study_command_prepares_then_stops_when_a_gate_refuses(hook, tiny_params, roots, monkeypatch, capsys):
    """`python -m rpevit study`: the hooks' preparation lines, then with nothing started and a gate refusing,
    that reason alone and nothing trained."""
    from rpevit import cli
    from rpevit.lab.schedule import study

    monkeypatch.setattr(cli, "_params", lambda args: tiny_params)
    trained = []
    monkeypatch.setattr(study, "run_study", lambda params, **kw: trained.append(kw["gates"]) or [])
    hook.why = "the budget is spent"
    assert cli.main(["study", "smoke", "--no-progress"]) == 0
    assert capsys.readouterr().out.splitlines() == ["prepared tiny", "the budget is spent"] and trained == []
    hook.why = ""
    assert cli.main(["study", "smoke", "--no-progress"]) == 0
    (gates,) = trained
    hook.why = "now refused"
    assert [gate(types.SimpleNamespace(runs_root=None, reports_root=None)) for gate in gates] == ["now refused"]
