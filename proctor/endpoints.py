"""Which judge or embeddings endpoint a request may name, and which bearer key goes where.

A configured key (PROCTOR_JUDGE_API_KEY, PROCTOR_EMBEDDINGS_API_KEY) is the operator's secret: it goes only
to the configured endpoint. A request may name an endpoint of its own (`options.base_url`,
`options.embedding_base_url`, the graders' `judge.base_url`) only when it is the configured one or listed in
the operator's allow-list (PROCTOR_JUDGE_ALLOWED_URLS, PROCTOR_EMBEDDINGS_ALLOWED_URLS; empty by default). The
check runs while the request is validated, so a refused URL is a 422 naming the field and no connection is
ever made to it (a closed port and an open one answer alike: no port scanning through Proctor).

URLs are compared in one canonical form: lower-case scheme and host, no default port, no trailing slash. A
URL with a query, a fragment, user-info, a dot segment in its path, whitespace, a backslash or a non-ASCII
character is refused outright: `?` and `#` would cut off the `/chat/completions` Proctor appends and reach any
path, and the others are ways to make two spellings of one URL compare differently.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from urllib.parse import unquote

import httpx

log = logging.getLogger("proctor.judge")

_FORBIDDEN = {"?": "a query", "#": "a fragment", "@": "user-info", "\\": "a backslash"}


def normalize_url(value: str) -> str:
    """The canonical form of an http(s) base URL; ValueError (a 422 naming the option) for anything else."""
    if not isinstance(value, str) or not value:
        raise ValueError("must be an http:// or https:// URL")
    if not value.isascii() or any(char.isspace() or ord(char) < 32 or ord(char) == 127 for char in value):
        raise ValueError("must be a plain ASCII URL without spaces or control characters")
    for char, what in _FORBIDDEN.items():
        if char in value:
            raise ValueError(
                f"must not contain {what} ({char!r}): give the endpoint's base URL, e.g. https://host/v1"
            )
    try:
        url = httpx.URL(value)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise ValueError(f"not a URL: {exc}") from None
    if url.scheme not in {"http", "https"} or not url.host:
        raise ValueError("must be an http:// or https:// URL")
    if url.userinfo or url.query or url.fragment:  # already refused above; kept in case httpx reads more
        raise ValueError("must not contain a query, a fragment or user-info")
    # httpx would resolve `..` itself, and a server may resolve `%2e%2e`: neither may change the endpoint.
    if any(unquote(segment) in {".", ".."} for segment in value.split("/")[3:]):
        raise ValueError("must not contain . or .. path segments")
    return str(url).rstrip("/")


@lru_cache(maxsize=64)
def allow_list(setting: str) -> frozenset[str]:
    """The canonical URLs of a comma-separated allow-list setting (entries that are not valid URLs are skipped)."""
    urls = set()
    for entry in setting.split(","):
        entry = entry.strip()
        if not entry:
            continue
        try:
            urls.add(normalize_url(entry))
        except ValueError as exc:
            log.warning("ignoring allow-list entry %r: %s", entry, exc)
    return frozenset(urls)


def same_url(left: str | None, right: str | None) -> bool:
    """Whether two base URLs are the same endpoint (canonical forms equal); False when either is unset or invalid."""
    if not left or not right:
        return False
    try:
        return normalize_url(left) == normalize_url(right)
    except ValueError:
        return left.rstrip("/") == right.rstrip("/")


def check_request_url(value: str, configured: str, allowed: str, setting: str) -> str:
    """The canonical form of a request's endpoint URL if the request may use it, else ValueError.

    Allowed: the configured endpoint itself, or a URL in the allow-list `allowed` (the value of `setting`).
    """
    url = normalize_url(value)
    if same_url(url, configured) or url in allow_list(allowed):
        return url
    raise ValueError(
        f"{url} is not an allowed endpoint: a request may name the configured endpoint or one listed in "
        f"{setting} (empty by default)"
    )


def key_for(
    url: str | None, configured: str, configured_key: str | None, request_key: str | None
) -> str | None:
    """The bearer key to send to `url`: the request's own key, else the configured key for the configured URL only."""
    if request_key:
        return request_key
    if url is None or same_url(url, configured):
        return configured_key
    return None
