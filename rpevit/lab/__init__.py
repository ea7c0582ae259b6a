"""The lab, around the science core: presets (`params`, `design`), a run's identity and files
(`run`, `records`, `runs`, `catalog`, `schema`, `revision`), the training of a run with checkpoints
and exact resume (`train`, `pack`, `evaluate`), the engines that train a study's grid (`study` —
sequential, packed — and `cluster` on Ray, one scheduler in `study`), where a study stands
(`study_status`, `time_limit`), the hooks a project adds its rules through (`hooks`) and the
benchmarks it keeps (`bench*`). It imports the core, never `rpevit.analysis`."""
