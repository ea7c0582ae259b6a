"""The science core: attention backends (`attention/`), positional methods (`position/`), the ViT
(`model`, configured by `config`), datasets as tensors (`data/`), the training step and loop (`loop`,
with the schedules of `budgets`), metrics and seed-level statistics (`metrics`, `stats`) and the
numerical checks of the methods (`checks`, `layer_probes`, `rotary_analysis`).

It takes module instances and tensors and knows nothing of presets, records or studies: nothing in
it imports `rpevit.lab`, `rpevit.report` or `analysis` (tests/test_docs.py), so it can be
lifted out as it is (docs/architecture.md)."""
