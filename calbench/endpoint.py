"""Asking an OpenAI-compatible server, before a run, whether it can serve the run: one free
``GET .../models`` (no tokens), so that a bad endpoint, a refused API key or a model name the
server does not serve is one line before any paid request, not a retried failure mid-run.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any

from calbench.api_support import ApiSetupError

DEFAULT_URLS = {"openai-chat-completions": "https://api.openai.com/v1/chat/completions"}
KEY_ENV = "OPENAI_API_KEY"  # lm-eval's local and OpenAI backends send it as a Bearer token
ROUTES = ("/chat/completions", "/completions")


def models_url(base_url: str) -> str:
    """The ``/models`` list beside a completions URL (``http://h:p/v1/chat/completions`` -> ``http://h:p/v1/models``)."""
    url = base_url.rstrip("/")
    for route in ROUTES:
        if url.endswith(route):
            return url[: -len(route)] + "/models"
    return url + "/models"


def _message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return " ".join(body.decode(errors="replace").split())[:200]
    error = data.get("error", data) if isinstance(data, dict) else data
    text = error.get("message", error) if isinstance(error, dict) else error
    return " ".join(str(text).split())[:200]


def served_models(base_url: str, key: str | None = None, timeout: float = 10.0) -> list[str] | None:
    """The model names the server lists (None when it has no ``/models``: nothing to check);
    a server that does not answer or refuses the key is an ``ApiSetupError``."""
    url = models_url(base_url)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as reply:
            data: Any = json.load(reply)
    except urllib.error.HTTPError as err:
        if err.code in (401, 403):
            raise ApiSetupError(
                f"base_url={base_url}: the server refused the API key (HTTP {err.code}: {_message(err.read())}); "
                f"lm-eval sends ${KEY_ENV}"
            ) from None
        if err.code in (404, 405):
            return None
        raise ApiSetupError(f"base_url={base_url}: {url} answered HTTP {err.code}: {_message(err.read())}") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        raise ApiSetupError(f"base_url={base_url}: no OpenAI-compatible server answers there ({reason})") from None
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return None
    return [str(e["id"]) for e in entries if isinstance(e, dict) and "id" in e]


def check_endpoint(backend: str, model_args: Mapping[str, Any], timeout: float = 10.0) -> None:
    """Refuse, in one line, a run whose server does not answer, refuses the key, or does not
    serve ``model=`` (a server that lists no models is given the benefit of the doubt)."""
    base_url = model_args.get("base_url") or DEFAULT_URLS.get(backend)
    if not base_url:
        raise ApiSetupError(
            f"--model {backend}: give base_url= (the server's .../v1/chat/completions or .../v1/completions)"
        )
    model = model_args.get("model") or model_args.get("pretrained")
    if not model:
        raise ApiSetupError(f"--model {backend}: give model= (a name the server serves)")
    served = served_models(str(base_url), os.environ.get(KEY_ENV), timeout)
    if served is not None and str(model) not in served:
        raise ApiSetupError(
            f"model={model}: the server at {base_url} does not serve it (it serves: {', '.join(served[:10]) or 'nothing'})"
        )
