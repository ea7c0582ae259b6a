"""The bench wing: side-by-side measurements, never tests — training and data throughput and the levers
(`throughput`), one attention layer against the token count (`attention`), packed runs (`pack`) and the
cost at each canvas's token count (`tokens`). It imports the store and training wings."""
