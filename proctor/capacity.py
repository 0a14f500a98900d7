"""A pool's back-pressure signals, shared by the verifier worker pool (`proctor.worker_pool`) and the sandbox
job queue (`proctor.sandboxes.pool`): the API answers `PoolFull` with 429
and Retry-After, `PoolClosed` with 503."""


class PoolFull(Exception):
    """The pool's queue is full; the caller should retry later (HTTP 429)."""


class PoolClosed(Exception):
    """The pool was shut down before the item ran."""
