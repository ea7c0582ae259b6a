"""The campaign's hooks into an rpevit study (rpevit/lab/hooks.py; entry point `rpevit.hooks` in
pyproject.toml): runs parked in the repository go on, a pilot's pre-registered budget and order gate
each start, `status` says both, and a gap pilot's README is its pre-registered report."""

from __future__ import annotations


def prepare(params) -> list[str]:
    """Put runs that another checkout parked back into runs/ (parking.restore)."""
    from .parking import restore

    return restore(params)


def refusal(params, runs_root=None, reports_root=None) -> str:
    """Why no new run starts: the preset's pre-registered CPU budget is spent, or it is a later pilot of a
    pre-registered order whose previous pilot has not ended NO-GO ("" when neither)."""
    from .budget import budget_spent

    return budget_spent(params, runs_root=runs_root, reports_root=reports_root) or out_of_order(params, reports_root)


def out_of_order(params, reports_root=None) -> str:
    """Why a pilot may not train yet: the pilot before it in its pre-registered order (orders.py) has not
    ended NO-GO; "" when it has, or for a preset outside the orders."""
    from . import gap_pilot, recall_pilot
    from .orders import previous_pilot

    previous = previous_pilot(params.name)
    if previous is None:
        return ""
    if previous in recall_pilot.ORDER:
        verdict = recall_pilot.summary(previous, reports_root)["verdict"]
    else:
        verdict = gap_pilot.final_verdict(previous, reports_root)
    if verdict == "NO-GO":
        return ""
    return (
        f"{params.name} trains only once {previous} has ended NO-GO (the pre-registered order); {previous} is "
        f"{verdict or 'still open'}"
    )


def status(params, runs_root=None, reports_root=None) -> list[str]:
    """The budget's line (training time against it, and while runs are left its forecast), the runs parked
    for the next `study` and the stable checkpoints kept for a longer budget."""
    from rpevit.lab.schema import finished
    from rpevit.lab.store.catalog import grid, study_records

    from .budget import over_budget, runs_in_flight, stated_budget, training_hours
    from .budget_forecast import budget_sentences
    from .parking import PARKED, pending
    from .stable_checkpoints import status_line

    lines = []
    if (stated := stated_budget(params.source or params.name)) is not None:
        spent = training_hours(params, runs_root, reports_root)
        stopped = over_budget(params, spent[0], stated, runs_root, reports_root) and not runs_in_flight(
            params, runs_root, reports_root
        )
        done = len(finished(study_records(params, runs_root, reports_root))) == len(grid(params))
        said = budget_sentences(params, params.source or params.name, done or stopped, runs_root, reports_root)
        lines.append(said.replace("**", ""))
    if parked := pending(params.name):
        lines.append(f"parked: {', '.join(parked)} (reports/{params.name}/{PARKED}/; the next `study` resumes them)")
    return lines + status_line(params)


def report(params, reports_root=None) -> bool:
    """A gap pilot's README is its pre-registered report, naming the notebooks (gap_pilot.write_report)."""
    from .pilot_overview import pilot_order

    if params.name not in pilot_order():
        return False
    from .gap_pilot import write_report

    write_report(params.name, reports_root)
    return True
