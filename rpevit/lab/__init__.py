"""The lab, around the science core: its base (`schema`, `result`, `revision`, `paths`, `progress`,
`tables`, `hooks`), its configuration (`params`, `design`) and four wings, each importing only those
below it — `store` (a run's identity, files and records), `training` (a run with checkpoints and exact
resume, packs, evaluation, torchrun), `bench` (the benchmarks) and `schedule` (the design's decisions,
what a study wants, the one scheduler and its engines, status). It imports the core, never
`rpevit.report` or `analysis`."""
