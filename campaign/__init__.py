"""The rpevit project's own campaign, outside the library: what this repository does to answer its
question, not what a user of rpevit needs.

- the pre-registered pilots' reports: gap pilots (`gap_pilot`, `pilot_overview`, `pilot_answer`),
  the recall pilots (`recall_pilot`, `recall_maps`, `recall_overview`), recipe pilots
  (`recipe_pilot`), docs/results.md's Findings (`findings`);
- the pilots' CPU budgets read from a preset's header (`budget`), unfinished runs parked in the
  repository (`parking`) with finished runs' stable checkpoints (`stable_checkpoints`) and short GPU
  sittings (`sitting`), with the device shell scripts in campaign/scripts/;
- the GPU acceptance run (`gpu_acceptance`) and the engine timing (`bench_engines`).

It reaches into a study only through rpevit's hooks (`hooks`, the `rpevit.hooks` entry point):
parked runs and kept stable checkpoints put back before a study, the budget as a start gate, their
lines in `status`, and a gap pilot's report as its index. rpevit imports nothing from here.
Commands: `python -m campaign --help`.
"""
