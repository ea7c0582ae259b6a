"""The schedule wing: what a study still wants (`wanted`), one grid cell (`cell`), the time limit
(`time_limit`), the one scheduler and the sequential and packed engines (`study`) and Ray (`cluster`),
where a study stands (`status`) and whether this machine reproduced it (`reproduction`). It sits above
the other wings and imports from all of them."""
