"""Hooks: how a project built on rpevit adds its own rules to a study, without rpevit knowing it.

A distribution names a module (or any object) under the entry-point group `rpevit.hooks`
(pyproject.toml: `[project.entry-points."rpevit.hooks"]`). Each of these it defines is called; all
are optional, and with no hook installed a study runs exactly as plain rpevit. Where nothing is installed
(a checkout run in place), `register(hook)` adds one for this process:

- `prepare(params) -> list[str]`: before `study` trains anything (e.g. put back runs saved
  elsewhere); the lines are printed;
- `refusal(params, runs_root, reports_root) -> str`: why no new run of the preset may start now
  ("" when it may): a start gate, asked before each run starts; a run already started is finished;
- `status(params, runs_root, reports_root) -> list[str]`: lines `status` prints under its first;
- `report(params, reports_root) -> bool`: write the preset's report index after `notebooks`
  (True: written, rpevit's own index is not).
"""

from __future__ import annotations

import functools
from importlib.metadata import entry_points

GROUP = "rpevit.hooks"
_REGISTERED: list = []


@functools.cache
def installed() -> tuple:
    """The hook objects the installed distributions name, in entry-point name order."""
    return tuple(point.load() for point in sorted(entry_points(group=GROUP), key=lambda p: p.name))


def register(hook) -> None:
    """Add a hook object for this process (once: one already installed or registered is not added again)."""
    if all(hook is not other for other in (*installed(), *_REGISTERED)):
        _REGISTERED.append(hook)


def _each(name: str):
    return [getattr(hook, name) for hook in (*installed(), *_REGISTERED) if hasattr(hook, name)]


def prepare(params) -> list[str]:
    """Every hook's lines from preparing a study of `params` (module docstring)."""
    return [line for call in _each("prepare") for line in call(params)]


def refusal(params, runs_root=None, reports_root=None) -> str:
    """The first hook's reason that no new run of `params` may start now; "" when every hook lets it."""
    return next((why for call in _each("refusal") if (why := call(params, runs_root, reports_root))), "")


def status(params, runs_root=None, reports_root=None) -> list[str]:
    """Every hook's status lines for `params`."""
    return [line for call in _each("status") for line in call(params, runs_root, reports_root)]


def report(params, reports_root=None) -> bool:
    """Whether a hook wrote the report index of `params` (the first that does; then no other is asked)."""
    return any(call(params, reports_root) for call in _each("report"))
