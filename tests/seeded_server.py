"""A stand-in for an OpenAI-compatible server, for the fast offline tests of calbench's API path
(the real server, vLLM's, is ``tests/test_api_server.py``'s, in CI's vLLM step).

It answers as a server that honours seeds does: a request's answer is drawn from a generator
seeded by its ``seed`` (a fresh one without), one per choice (``n``). It keeps every payload it
got, serves ``/v1/models``, checks the key when given one, and with ``strict=True`` refuses
parameters OpenAI's API does not take (``top_k``, ``repetition_penalty``) as OpenAI does (400).
``fail_after`` answers that many requests, then fails every
one (HTTP 500); ``ignore_n`` answers one completion whatever ``n`` asks. It listens on 127.0.0.1 only, on a free port, in a thread of the test process.
"""

from __future__ import annotations

import json
import random
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OPENAI_UNKNOWN = ("top_k", "repetition_penalty")


class SeededServer:
    def __init__(
        self,
        model: str = "stub",
        key: str | None = None,
        strict: bool = False,
        fail_after: int | None = None,
        ignore_n: bool = False,
    ) -> None:
        self.model, self.key, self.strict = model, key, strict
        self.fail_after, self.ignore_n = fail_after, ignore_n  # a server that dies mid-run; one that ignores n
        self.answered = 0
        self.payloads: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _send(self, code: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if server.key is None or self.headers.get("Authorization") == f"Bearer {server.key}":
                    return True
                self._send(401, {"error": {"message": "Incorrect API key provided", "type": "invalid_request_error"}})
                return False

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                if not self._authorized():
                    return
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.payloads.append(payload)
                    failing = server.fail_after is not None and server.answered >= server.fail_after
                    server.answered += not failing
                if failing:
                    self._send(500, {"error": {"message": "the server is gone"}})
                    return
                if payload.get("model") != server.model:
                    self._send(404, {"error": {"message": f"The model `{payload.get('model')}` does not exist."}})
                    return
                unknown = [k for k in OPENAI_UNKNOWN if k in payload] if server.strict else []
                if unknown:
                    self._send(400, {"error": {"message": f"Unrecognized request argument supplied: {unknown[0]}"}})
                    return
                seed = payload.get("seed")
                rng = random.Random(seed) if seed is not None else random.SystemRandom()
                n = 1 if server.ignore_n else int(payload.get("n") or 1)
                texts = [str(rng.randint(0, 40)) for _ in range(n)]
                chat = self.path.rstrip("/").endswith("/chat/completions")
                choices = [
                    {
                        "index": i,
                        "finish_reason": "stop",
                        **({"message": {"role": "assistant", "content": t}} if chat else {"text": t}),
                    }
                    for i, t in enumerate(texts)
                ]
                self._send(200, {"object": "chat.completion" if chat else "text_completion", "model": server.model,
                                 "choices": choices, "usage": {"prompt_tokens": 10, "completion_tokens": len(texts)}})  # fmt: skip

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> SeededServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
