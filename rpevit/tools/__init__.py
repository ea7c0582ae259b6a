"""The project's own upkeep, above everything else: checks of this installation (`doctor`), recipe
pilots (`pilot`) and the wall time of the two engines (`bench_engines`). No science module imports it."""
