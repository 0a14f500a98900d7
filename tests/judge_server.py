"""The scripted stand-in for an LLM judge: a real OpenAI-compatible HTTP server on a free local port.

`JudgeServer` serves `POST /v1/chat/completions` and `POST /v1/embeddings` from a thread
(http.server, HTTP/1.1 keep-alive). What it answers is scripted by the test:
- `server.responder = fn(messages) -> str` decides the reply text of ordinary calls (default: "").
- `server.script(action, ...)` queues one-off actions consumed by the next calls, in order:
  `Reply(text)`, `Refusal(text)`, `Error(status, retry_after=None, message=...)`, `Slow(seconds)` (then the responder's
  reply), `Drop()` (close the connection without answering), `Raw(body)` (200 with that JSON body).
- `server.latency_s` adds a delay to every call (benchmarks).
Every chat request body is recorded in `server.requests`, every embeddings request body in
`server.embedding_requests`, and the Authorization header of every request in `server.authorizations`.

Embeddings are deterministic bag-of-words vectors (hashed tokens), so texts sharing words are close.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

EMBEDDING_DIM = 64


@dataclass(frozen=True)
class Reply:
    """Answer with this text (200)."""

    text: str


@dataclass(frozen=True)
class Refusal:
    """Answer 200 with content null and OpenAI's `refusal` field set."""

    text: str = "I can't help with that."


@dataclass(frozen=True)
class Error:
    """Answer with an HTTP error status (and a Retry-After header when given)."""

    status: int
    retry_after: str | None = None
    message: str = "scripted error"


@dataclass(frozen=True)
class Slow:
    """Wait this long, then answer as usual (a client with a shorter timeout gives up first)."""

    seconds: float


@dataclass(frozen=True)
class Drop:
    """Close the connection without sending a response."""


@dataclass(frozen=True)
class Hold:
    """Wait until the test sets `release`, then answer as usual (proves what happens while a call waits)."""

    release: threading.Event


@dataclass(frozen=True)
class Raw:
    """Answer 200 with this JSON body as it is (a server that is not quite OpenAI-compatible)."""

    body: Any


Action = Reply | Refusal | Error | Slow | Drop | Hold | Raw


def embed(text: str) -> list[float]:
    """A deterministic unit vector: hashed lower-case word counts."""
    vector = [0.0] * EMBEDDING_DIM
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % EMBEDDING_DIM] += 1.0
    norm = math.sqrt(sum(value * value for value in vector)) or 1.0
    return [value / norm for value in vector]


class JudgeServer:
    """A local OpenAI-compatible server with scripted replies; use as a context manager."""

    def __init__(
        self, responder: Callable[[list[dict[str, Any]]], str] | None = None, latency_s: float = 0.0
    ):
        self.responder = responder or (lambda messages: "")
        self.latency_s = latency_s
        self.requests: list[dict[str, Any]] = []
        self.embedding_requests: list[dict[str, Any]] = []
        self.embedding_reply: dict[str, Any] | None = None  # when set, every embeddings call gets this body
        self.authorizations: list[str | None] = []  # the Authorization header of every request, in order
        self.inflight = 0
        self.max_inflight = 0
        self._actions: deque[Action] = deque()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    def __enter__(self) -> JudgeServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop serving; sleeping handlers wake up at once."""
        self._stopping.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def script(self, *actions: Action) -> None:
        """Queue one-off actions for the next calls, in order."""
        with self._lock:
            self._actions.extend(actions)

    def wait_idle(self, timeout_s: float = 10.0) -> None:
        """Wait until no request is being handled (slow handlers of earlier tests finish), bounded."""
        deadline = time.monotonic() + timeout_s
        while self.inflight and time.monotonic() < deadline:
            self._stopping.wait(0.01)
        with self._lock:
            self.max_inflight = self.inflight

    def reset_script(self) -> None:
        """Drop queued actions that were not consumed."""
        with self._lock:
            self._actions.clear()

    def _next_action(self) -> Action | None:
        with self._lock:
            return self._actions.popleft() if self._actions else None

    @property
    def calls(self) -> int:
        """Chat requests received so far."""
        with self._lock:
            return len(self.requests)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                with server._lock:
                    server.authorizations.append(self.headers.get("Authorization"))
                    server.inflight += 1
                    server.max_inflight = max(server.max_inflight, server.inflight)
                try:
                    if server.latency_s:
                        server._stopping.wait(server.latency_s)
                    if self.path == "/v1/embeddings":
                        self._embeddings(body)
                    elif self.path == "/v1/chat/completions":
                        self._chat(body)
                    else:
                        self._send(404, {"error": {"message": f"no route {self.path}"}})
                finally:
                    with server._lock:
                        server.inflight -= 1

            def _embeddings(self, body: dict[str, Any]) -> None:
                with server._lock:
                    server.embedding_requests.append(body)
                if server.embedding_reply is not None:
                    self._send(200, server.embedding_reply)
                    return
                texts = body.get("input")
                texts = [texts] if isinstance(texts, str) else texts
                data = [
                    {"object": "embedding", "index": i, "embedding": embed(t)} for i, t in enumerate(texts)
                ]
                self._send(200, {"object": "list", "data": data, "model": body.get("model", "stand-in")})

            def _chat(self, body: dict[str, Any]) -> None:
                with server._lock:
                    server.requests.append(body)
                action = server._next_action()
                if isinstance(action, Drop):
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if isinstance(action, Raw):
                    self._send(200, action.body)
                    return
                if isinstance(action, Error):
                    headers = {"Retry-After": action.retry_after} if action.retry_after is not None else {}
                    self._send(action.status, {"error": {"message": action.message}}, headers)
                    return
                if isinstance(action, Slow) and server._stopping.wait(action.seconds):
                    return
                if isinstance(action, Hold):
                    while not action.release.wait(0.05):
                        if server._stopping.is_set():
                            return
                message: dict[str, Any]
                if isinstance(action, Refusal):
                    message = {"role": "assistant", "content": None, "refusal": action.text}
                else:
                    text = action.text if isinstance(action, Reply) else server.responder(body["messages"])
                    message = {"role": "assistant", "content": text}
                prompt = sum(len(str(m.get("content", ""))) for m in body["messages"]) // 4
                completion = len(message.get("content") or "") // 4
                self._send(
                    200,
                    {
                        "id": "stand-in",
                        "object": "chat.completion",
                        "model": body.get("model") or "stand-in-judge",
                        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                        "usage": {
                            "prompt_tokens": prompt,
                            "completion_tokens": completion,
                            "total_tokens": prompt + completion,
                        },
                    },
                )

        return Handler


def user_text(messages: list[dict[str, Any]]) -> str:
    """The last user message's text (what the judge prompt put there)."""
    return next((str(m["content"]) for m in reversed(messages) if m.get("role") == "user"), "")


def response_of(messages: list[dict[str, Any]]) -> str:
    """The graded text between <response> tags of a judge prompt."""
    found = re.search(r"<response>\n?(.*?)\n?</response>", user_text(messages), re.DOTALL)
    return found.group(1) if found else ""


def keyword_rubric_judge(messages: list[dict[str, Any]]) -> str:
    """A deterministic 'judge' for tests: a criterion is met when its last word occurs in the response.

    Answers rubric prompts with JSON verdicts, principle/equivalence prompts with Final Decision, implicit
    rubric prompts with [RESULT] n, and pairwise prompts by preferring the longer response.
    """
    text = user_text(messages)
    response = response_of(messages).lower()
    if "<response_A>" in text:
        first = re.search(r"<response_A>\n(.*?)\n</response_A>", text, re.DOTALL).group(1)
        second = re.search(r"<response_B>\n(.*?)\n</response_B>", text, re.DOTALL).group(1)
        winner = "A" if len(first) > len(second) else "B" if len(second) > len(first) else "tie"
        return json.dumps({"reason": "the longer one says more", "winner": winner})
    if "Criteria:" in text:
        criteria = re.findall(
            r"^(\d+)\. (.*?)(?: \(PITFALL.*\))?$", text.split("Criteria:", 1)[1], re.MULTILINE
        )
        verdicts = [
            {
                "id": int(number),
                "reason": "checked",
                "met": criterion.split()[-1].lower().strip(".") in response,
            }
            for number, criterion in criteria
        ]
        return json.dumps({"verdicts": verdicts})
    if "Rubric:" in text:
        criteria = re.findall(r"^- \([+-][\d.]+ points\) (.*)$", text, re.MULTILINE)
        met = sum(criterion.split()[-1].lower().strip(".") in response for criterion in criteria)
        return f"Overall judgement.\n[RESULT] {round(10 * met / max(1, len(criteria)))}"
    if "Principle:" in text:
        principle = re.search(r"Principle: (.*)", text).group(1)
        yes = principle.split()[-1].lower().strip(".") in response
        return f"Considered.\nFinal Decision: {'Yes' if yes else 'No'}"
    if "Gold answer:" in text:
        gold = re.search(r"Gold answer: (.*)", text).group(1).strip().lower()
        yes = gold in response or gold.replace(" ", "") == response.replace(" ", "")
        return f"Compared.\nFinal Decision: {'Yes' if yes else 'No'}"
    return ""
