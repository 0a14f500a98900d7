"""`python -m proctor.api`: serve with the settings from the PROCTOR_* environment."""

from __future__ import annotations

from pydantic import ValidationError

from proctor.api.server import serve
from proctor.settings import get_settings


def main() -> None:
    """Read the settings (one readable line on a bad value) and serve."""
    try:
        settings = get_settings()
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        name = "_".join(str(part) for part in error["loc"]).upper()
        raise SystemExit(f"proctor: invalid PROCTOR_{name}: {error['msg']}") from None
    serve(settings)


if __name__ == "__main__":
    main()
