"""JSON bodies that always encode: pydantic's fast serializer, with a safe fallback for odd text."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic_core import PydanticSerializationError, to_json, to_jsonable_python
from starlette.responses import Response

NanMode = Literal["null", "constants"]


def dump_json(content: Any, *, nan: NanMode = "null") -> bytes:
    """Serialize models, dicts and lists to JSON bytes; `nan="constants"` writes NaN instead of null."""
    try:
        return to_json(content, inf_nan_mode=nan)
    except PydanticSerializationError:
        # Lone surrogates (valid in a JSON \\u escape, invalid in UTF-8) would otherwise turn into a 500.
        plain = to_jsonable_python(content, inf_nan_mode=nan)
        return json.dumps(plain, ensure_ascii=True, allow_nan=nan == "constants").encode("ascii")


def json_response(
    content: Any, status_code: int = 200, headers: dict[str, str] | None = None, *, nan: NanMode = "null"
) -> Response:
    """A ready JSON response; routes return it directly so FastAPI skips re-validating large results."""
    return Response(
        dump_json(content, nan=nan), status_code=status_code, headers=headers, media_type="application/json"
    )
