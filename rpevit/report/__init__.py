"""A study's report folder reports/<preset>/: what a notebook writes there (`store`: figures, tables,
texts and a per-notebook manifest), its index README.md (`index`) and the headless runner that
executes the numbered notebooks into it (`notebooks`). The figures and tables themselves are the
notebooks' analysis (the top-level `analysis` package, beside the notebooks)."""
