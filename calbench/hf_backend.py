"""``calbench-hf``: lm-eval's HF model with the prompt computed once per prompt.

It answers the same requests as ``--model hf`` (it is a subclass, and lm-eval's own
tokenization is kept), faster:

* loglikelihood: requests that share a context are scored as one token trie with
  ``calbench.scorer.score_trie`` (the prompt once, then one token per trie node, instead
  of prompt + answer per request), and each answer comes back as a
  ``likelihood.TokenLogprobs`` carrying its per-token terms, from which calbench's
  likelihood tasks compute the exact ``logit_kl``;
* generate_until: the N repeats of a prompt share one prefill of the prompt, then decode
  as one batch (up to ``sampling_batch_size`` rows) with the same sampling settings.

Reached through ``calbench eval --model calbench-hf --model_args pretrained=...``; every
``hf`` model argument works, plus ``sampling_batch_size`` (default 1024).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import torch
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm import tqdm

from calbench.likelihood import TokenLogprobs
from calbench.scorer import cache_kwarg, output_cache, score_trie
from calbench.trie import build_trie


class CalbenchHFLM(HFLM):
    """lm-eval's ``hf`` backend, with prompt-sharing loglikelihood and sampling."""

    def __init__(self, *args: Any, sampling_batch_size: int = 1024, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sampling_batch_size = int(sampling_batch_size)

    def _loglikelihood_tokens(
        self,
        requests: list[tuple[tuple[str, str], list[int], list[int]]],
        disable_tqdm: bool = False,
        override_bs: int | None = None,
    ) -> list[tuple[float, bool]]:
        # Rolling loglikelihood (perplexity) windows have no shared contexts to exploit.
        if self.backend != "causal" or any(key is None for key, _, _ in requests):
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        groups: dict[tuple[int, ...], list[int]] = {}
        for i, (_, context, _) in enumerate(requests):
            groups.setdefault(tuple(context), []).append(i)
        out: list[tuple[float, bool]] = [(0.0, True)] * len(requests)
        for context, indices in tqdm(groups.items(), desc="calbench-hf answer tries", disable=disable_tqdm):
            longest = max(len(requests[i][2]) for i in indices)
            if len(context) + longest > self.max_length:  # would need truncation: lm-eval's way
                for i, answer in zip(
                    indices, super()._loglikelihood_tokens([requests[i] for i in indices], True), strict=True
                ):
                    out[i] = answer
                continue
            scored = [i for i in indices if requests[i][2]]
            for i in indices:
                if not requests[i][2]:  # an empty continuation scores log 1
                    out[i] = (TokenLogprobs((), ()), True)
            if not scored:
                continue
            trie = build_trie([requests[i][2] for i in scored], allow_prefixes=True)
            scores = score_trie(self.model, list(context), trie)
            nodes = trie.string_nodes()
            for row, i in enumerate(scored):
                path = nodes[row][nodes[row] >= 0]
                answer = (TokenLogprobs(requests[i][2], scores.edge_logprob[path]), bool(scores.greedy[path].all()))
                out[i] = answer
                self.cache_hook.add_partial("loglikelihood", requests[i][0], (float(answer[0]), answer[1]))
        return out

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        if self.backend != "causal":
            return list(super().generate_until(requests, disable_tqdm))
        groups: dict[tuple[str, str], list[int]] = {}
        for i, request in enumerate(requests):
            context, gen_kwargs = request.args
            groups.setdefault((context, json.dumps(gen_kwargs, sort_keys=True, default=str)), []).append(i)
        out = [""] * len(requests)
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        pbar = tqdm(total=len(requests), desc="calbench-hf samples", disable=disable_tqdm or self.rank != 0)
        for (context, _), indices in groups.items():
            kwargs = normalize_gen_kwargs(requests[indices[0]].args[1], self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = kwargs.pop("max_gen_toks")
            prompt, _ = self.tok_batch_encode(
                [context], left_truncate_len=self.max_length - max_gen_toks, truncation=self.truncation
            )
            prompt = prompt.to(self.device)
            cache = self._prefill(prompt)
            for start in range(0, len(indices), self.sampling_batch_size):
                batch = indices[start : start + self.sampling_batch_size]
                rows = prompt.expand(len(batch), -1).contiguous()
                extra = {}
                if cache is not None:
                    shared = copy.deepcopy(cache)
                    shared.batch_repeat_interleave(len(batch))
                    extra[cache_kwarg(self.model)] = shared
                tokens = self._model_generate(
                    context=rows,
                    attention_mask=torch.ones_like(rows),
                    stop=until,
                    max_length=prompt.shape[1] + max_gen_toks,
                    **kwargs,
                    **extra,
                )
                for i, row in zip(batch, tokens.tolist(), strict=True):
                    out[i] = self._decode(row[prompt.shape[1] :], until)
                    self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
                pbar.update(len(batch))
        pbar.close()
        return out

    @torch.no_grad()
    def _prefill(self, prompt: torch.Tensor) -> Any:
        """KV cache of all prompt tokens but the last (generate computes that one)."""
        if prompt.shape[1] < 2:
            return None
        return output_cache(self.model(input_ids=prompt[:, :-1], use_cache=True))

    def _decode(self, tokens: list[int], until: list[str]) -> str:
        """One continuation's text, post-processed exactly as lm-eval's ``hf`` does."""
        if isinstance(self.think_end_token, int) and self.think_end_token in tokens:
            tokens = tokens[len(tokens) - tokens[::-1].index(self.think_end_token) :]
            text = self.tok_decode(tokens).lstrip()
        else:
            text = self.tok_decode(tokens)
        think = self.think_end_token if isinstance(self.think_end_token, str) else None
        return str(postprocess_generated_text(generation=text, stop=until, think_end_token=think))
