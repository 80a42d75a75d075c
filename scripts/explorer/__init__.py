"""A deterministic explorer of schedules over the real commit code (test support, never shipped):
``world`` (a file system, a Metastore and a clock in memory), ``scheduler`` (actors that may be
paused or killed before any call), ``scenario`` (the actors, the writers' intent, the
invariants), ``explore`` (many schedules from a seed, shrinking what fails)."""
