"""The training wing: one run trained with checkpoints and exact resume (`train`), its record
(`run_record`), several runs of a variant in one step (`pack`), other resolutions and re-timing
(`evaluate`), a longer budget going on from another preset's run (`continuation`), torchrun
(`distributed`) and the services a run needs — dataset, models, preflight, kept weights (`runs`). It
imports the store, never the bench or schedule wings."""
