"""The store wing: a run's identity (`run`), its files on disk — atomic writes, locks, kept copies, the
runs and reports roots (`records`) — and a preset's current records read back (`catalog`). It imports the
lab's base and configuration, never the training, bench or schedule wings."""
