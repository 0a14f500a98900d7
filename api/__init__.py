"""The HTTP service (FastAPI): /v1 scoring routes, trainer compatibility routes, auth, admission control, metrics.

`proctor.api.app.create_app()` builds the app; `proctor.api.server.serve()` runs it with uvicorn.
"""
