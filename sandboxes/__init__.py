"""Running untrusted programs: jobs, limits and verdicts (job.py), backends (nsjail, docker, local), languages,
the warm-start mode for Python, and the sandbox pool. Nothing here imports the verifiers."""
