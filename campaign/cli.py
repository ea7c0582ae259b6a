"""`python -m campaign COMMAND`: the project's campaign commands (campaign/__init__.py). Each module
named in COMMANDS holds its command's arguments (`add_parser`) and body (`command`). A mistake prints
one `error:` line and exits with status 2, as rpevit's commands do."""

from __future__ import annotations

import argparse
import importlib
import sys

from rpevit.cli import command_parser
from rpevit.core.errors import UserError

COMMANDS = {
    "gap-pilot": "pilot_overview",
    "recall-pilot": "recall_pilot",
    "recipe-pilot": "recipe_pilot",
    "findings": "findings",
    "park": "parking",
    "gpu-sitting": "sitting",
    "gpu-acceptance": "gpu_acceptance",
    "bench-engines": "bench_engines",
    "feature-draws": "feature_draws",
}
EXAMPLES = """examples:
  python -m campaign study canvas40_long             rpevit's study with the campaign's hooks (where not installed)
  python -m campaign gap-pilot --overview            every gap pilot's line: reports/gap_pilots.md and the README
  python -m campaign recall-pilot recall_pilot       the recall pilot's report: reports/recall_pilot/README.md
  python -m campaign recall-pilot --overview         every recall pilot and the answer: reports/recall_pilots.md
  python -m campaign park canvas40_long              keep unfinished runs (parked/) and stable checkpoints (stable/)
  python -m campaign feature-draws canvas40_long     FAVOR+ runs' test top-1 under fresh random features
  python -m campaign findings                        copy the converged study's answer into docs/results.md
  python -m campaign gpu-acceptance                  the GPU acceptance run (docs/scaling.md)
"""


def _module(command: str):
    return importlib.import_module(f"{__package__}.{COMMANDS[command]}")


def build_parser() -> argparse.ArgumentParser:
    """Every campaign command's parser, from its module's `add_parser`."""
    parser, sub = command_parser("python -m campaign", __doc__, EXAMPLES)
    for command in COMMANDS:
        _module(command).add_parser(sub)
    return parser


def main(argv=None) -> int:
    """Run one campaign command; user errors → one message, exit status 2. `study …` is rpevit's own
    `study` with the campaign's hooks registered, for a checkout where the package is not installed (a
    lent GPU machine): parked runs put back, the pre-registered budget gating each start."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["study"]:
        from rpevit import cli
        from rpevit.lab import hooks as rpevit_hooks

        from . import hooks

        rpevit_hooks.register(hooks)
        return cli.main(argv)
    args = build_parser().parse_args(argv)
    try:
        return _module(args.command).command(args)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
