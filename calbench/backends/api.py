"""``calbench-chat-completions`` and ``calbench-completions``: lm-eval's ``local-chat-completions``
and ``local-completions`` with fewer, concurrent requests for many samples of one prompt.

calbench's tasks send each sample of a prompt as its own request with its own seed
(``calbench.api_support``). lm-eval's backends group requests by their settings and send each
group on its own, so a sample's own seed costs them their concurrency: one request at a time.
These two send every request ``num_concurrent`` at a time, and with ``n=K`` join K samples of a
prompt into one request for K completions (OpenAI's ``n``; vLLM draws them independently), the
request's seed that of the first. A server that returns fewer completions than asked ignores
``n``: said in one line, the run stops. Each answer is handed to lm-eval's cache hook under its
own sample's request (its seed in the key), so ``--use_cache`` resumes an interrupted run.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from lm_eval.api.instance import Instance
from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

from calbench import api_support


class _SamplesPerRequest:
    """The shared part: ``n`` samples per request, every request ``num_concurrent`` at a time."""

    CALBENCH_NAME = ""
    samples_per_request = 1
    # lm-eval's TemplateAPI attributes this mixin uses
    _concurrent: int
    max_retries: int
    timeout: int
    verify_certificate: bool

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        if not requests:
            return []
        args = [r.args for r in requests]
        runs = api_support.join_samples(args, self.samples_per_request)
        replies = asyncio.run(self._send(args, runs, disable_tqdm))
        out: list[str] = [""] * len(requests)
        for run, texts in zip(runs, replies, strict=True):
            if len(texts) != len(run):
                raise RuntimeError(
                    f"the server returned {len(texts)} completion(s) to a request for n={len(run)}: it ignores n "
                    f"(run with n=1, one request per sample)"
                )
            for i, text in zip(run, texts, strict=True):
                out[i] = text
        return out

    async def _send(self, args: list[tuple[Any, ...]], runs: list[list[int]], disable_tqdm: bool) -> list[Any]:
        from aiohttp import ClientSession, ClientTimeout, TCPConnector
        from tenacity import retry, stop_after_attempt, wait_exponential
        from tqdm.asyncio import tqdm_asyncio

        sem = asyncio.Semaphore(self._concurrent)
        connector = TCPConnector(limit=self._concurrent, ssl=self.verify_certificate)
        async with ClientSession(connector=connector, timeout=ClientTimeout(total=self.timeout)) as session:
            call = retry(
                stop=stop_after_attempt(self.max_retries),
                wait=wait_exponential(multiplier=0.5, min=1, max=10),
                reraise=True,
            )(self.amodel_call)  # type: ignore[attr-defined]  # lm-eval's TemplateAPI.amodel_call
            tasks = []
            for run in runs:
                context, gen = args[run[0]][0], copy.deepcopy(args[run[0]][1])
                if len(run) > 1:
                    gen["n"] = len(run)
                tasks.append(
                    asyncio.create_task(
                        call(
                            session=session,
                            sem=sem,
                            messages=[context],
                            cache_keys=[args[i] for i in run],  # each answer cached under its own sample's request
                            generate=True,
                            gen_kwargs=gen,
                        )
                    )
                )
            return list(await tqdm_asyncio.gather(*tasks, desc="Requesting API", disable=disable_tqdm))


class ChatCompletions(_SamplesPerRequest, LocalChatCompletion):
    """``calbench-chat-completions``: ``local-chat-completions`` with ``n`` samples per request."""

    CALBENCH_NAME = "calbench-chat-completions"

    def __init__(self, n: int | str = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.samples_per_request = int(n)


class Completions(_SamplesPerRequest, LocalCompletionsAPI):
    """``calbench-completions``: ``local-completions`` with ``n`` samples per request (the prompt
    sent as text: no tokenizer is needed, unless ``tokenizer_backend`` asks for one)."""

    CALBENCH_NAME = "calbench-completions"

    def __init__(self, n: int | str = 1, tokenizer_backend: str | None = None, **kwargs: Any) -> None:
        super().__init__(tokenizer_backend=tokenizer_backend, **kwargs)
        self.samples_per_request = int(n)
