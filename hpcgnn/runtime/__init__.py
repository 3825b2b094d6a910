"""The role runtimes, above the graph and the samplers: :func:`initialize` (one call
at the top of every script, :mod:`.launch`), the followers' command loop
(:mod:`.follow`: where a server waits for commands) and a sampler rank's loop
(:mod:`.sampler`).  Nothing below this package imports it."""
from .launch import initialize

__all__ = ["initialize"]
