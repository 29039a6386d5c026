"""Asking an OpenAI-compatible server, before a run, whether it can serve the run: one free
``GET .../models`` (no tokens), so that a bad endpoint, a refused API key or a model name the
server does not serve is one line before any paid request, not a retried failure mid-run; then
one probe request of one answer token with the sampling parameters the tasks send (``probe``),
so that a parameter the server rejects, or ``n`` it ignores, is named in one line too.
"""

from __future__ import annotations

import json
import os
import re
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
    """Refuse, in one line, a run whose server does not answer, refuses the key, does not serve
    ``model=`` (a server that lists no models is given the benefit of the doubt), rejects a
    sampling parameter or ignores ``n`` (``probe``: one request of one token)."""
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
    n = model_args.get("n", 1)
    probe(backend, model_args, int(n) if str(n).isdigit() else 1)


PROBE_PROMPT = "Write the number 1."
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "repetition_penalty": 1.0}  # what calbench's tasks send


def probe(backend: str, model_args: Mapping[str, Any], samples_per_request: int = 1, timeout: float = 60.0) -> None:
    """One request of one answer token (two completions when ``n`` is asked for) with the sampling
    parameters ``backend`` sends: refuse, in one line, a server that rejects one (naming it) or
    answers fewer completions than ``n`` asks."""
    from calbench.api_support import BACKENDS, sent_settings

    base_url = str(model_args.get("base_url") or DEFAULT_URLS.get(backend))
    chat = BACKENDS[backend].kind == "chat" if backend in BACKENDS else "chat" in base_url
    settings = sent_settings(SAMPLING, backend, seed=0)
    payload: dict[str, Any] = {
        "model": model_args.get("model") or model_args.get("pretrained"),
        **({"messages": [{"role": "user", "content": PROBE_PROMPT}]} if chat else {"prompt": PROBE_PROMPT}),
        ("max_completion_tokens" if backend == "openai-chat-completions" else "max_tokens"): 1,
        **settings,
    }
    n = min(samples_per_request, 2)
    if n > 1:
        payload["n"] = n
    key = os.environ.get(KEY_ENV)
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
    request = urllib.request.Request(base_url, data=json.dumps(payload).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as reply:
            data: Any = json.load(reply)
    except urllib.error.HTTPError as err:
        message = _message(err.read())
        named = [k for k in (*settings, "n") if re.search(rf"(?<![\w.]){re.escape(k)}(?![\w])", message)]
        what = f"rejects {', '.join(named)}" if named else "refused calbench's probe request"
        raise ApiSetupError(f"base_url={base_url}: the server {what} (HTTP {err.code}: {message})") from None
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ApiSetupError(f"base_url={base_url}: the probe request failed ({getattr(err, 'reason', err)})") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    if n > 1 and isinstance(choices, list) and len(choices) < n:
        raise ApiSetupError(
            f"base_url={base_url}: the server ignores n (asked for {n} completions, it answered {len(choices)}): "
            "run with n=1, one request per sample"
        )
