"""``calbench-hf``: lm-eval's HF model with the prompt computed once per prompt.

It answers the same requests as ``--model hf`` (it is a subclass, and lm-eval's own
tokenization is kept), faster:

* first_token_support, calbench's own request kind (the open-ended task's first answer
  token): the top-p support sizes of the next-token distribution after a prompt;
* loglikelihood: requests that share a context are scored as one token trie with
  ``calbench.backends.tree_attention.score_trie`` (the prompt once, then one token per trie node, instead
  of prompt + answer per request), and each answer comes back as a
  ``likelihood_metrics.TokenLogprobs`` carrying its per-token terms, from which calbench's
  likelihood tasks compute the exact ``logit_kl``;
* enumerate_numeric_answers, calbench's request kind for the sample-free tasks: the whole
  distribution of the number the model samples, by best-first enumeration of its token tree
  (``calbench.backends.enumeration``);
* generate_until: the N repeats of a prompt share one prefill of the prompt, then decode
  as one batch (up to ``sampling_batch_size`` samples) with the same sampling settings.
  Plain softmax sampling (the numeric tasks: T, top_k 0, top_p 1, stop at EOS) and greedy
  decoding (the retention tasks) run calbench's own decoding loop (``calbench.backends.sampler``), which also shares every common
  prefix among the samples, drops finished ones and moves only the cache rows that
  change, and decodes distinct prompts side by side (their common prefix once) while
  the batch and its KV cache have room; any other settings run HF generate on the shared prompt cache.

Reached through ``calbench eval --model calbench-hf --model_args pretrained=...``; every
``hf`` model argument works, plus ``sampling_batch_size`` (default 1024 samples decoded at
once) and ``sampling_cache_gb`` (default 4: distinct prompts join a batch only while its KV
cache stays within it; a prompt's own repeats always run together, up to the batch size).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import torch
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs, postprocess_generated_text
from tqdm import tqdm

from calbench.backends.enumeration import Budget, TokenTable, answer_space, enumerate_answers
from calbench.backends.sampler import sample_many
from calbench.backends.tree_attention import cache_kwarg, output_cache, score_trie
from calbench.metrics.enumeration import Enumeration
from calbench.metrics.likelihood import TokenLogprobs
from calbench.policy import greedy_deviations, sampling_deviations
from calbench.provenance import check_adapter_folder
from calbench.trie import build_trie


def _sampler_temperature(kwargs: dict[str, Any], until: list[str], eos: str) -> float | None:
    """The temperature calbench's sampler runs these settings at (0: greedy), stopped only by EOS;
    None for anything else (HF generate).

    That is ``calbench.policy``'s pure sampling at any positive temperature, every setting
    given (left unset, HF generate would apply the model's generation-config defaults,
    which only ``_generate`` reproduces), or greedy decoding (``policy.greedy_deviations``),
    anything else at its neutral value, no stop string but EOS.
    """
    if not set(until) <= {eos}:
        return None
    if not sampling_deviations(kwargs, any_temperature=True):
        return float(kwargs["temperature"])
    return 0.0 if not greedy_deviations(kwargs) else None


@dataclass
class _SideBySide:
    """Prompts with one sampling setting, waiting to be sampled as one batch."""

    max_gen_toks: int
    temperature: float
    until: list[str]
    parts: list[tuple[torch.Tensor, list[int]]] = field(default_factory=list)  # (prompt ids, request indices)
    samples: int = 0
    longest: int = 0  # the longest prompt's tokens

    def fits(self, lm: CalbenchHFLM, prompt_tokens: int, samples: int) -> bool:
        """Whether a prompt's ``samples`` may join: at most sampling_batch_size samples in all, and
        a KV cache of at most sampling_cache_gb (a prompt alone always runs, as before)."""
        rows = self.samples + samples
        positions = max(self.longest, prompt_tokens) + self.max_gen_toks
        return rows <= lm.sampling_batch_size and lm._cache_bytes(rows, positions) <= lm.sampling_cache_gb * 2**30


class CalbenchHFLM(HFLM):
    """lm-eval's ``hf`` backend, with prompt-sharing loglikelihood and sampling."""

    def __init__(
        self, *args: Any, sampling_batch_size: int = 1024, sampling_cache_gb: float = 4.0, **kwargs: Any
    ) -> None:
        if isinstance(kwargs.get("peft"), str):  # a broken adapter: one clear error, not peft's deep in loading
            try:
                check_adapter_folder(Path(kwargs["peft"]).expanduser())
            except ValueError as err:
                raise ValueError(f"calbench-hf: peft={kwargs['peft']}: {err}") from None
        super().__init__(*args, **kwargs)
        self.sampling_batch_size = int(sampling_batch_size)
        self.sampling_cache_gb = float(sampling_cache_gb)

    def _cache_bytes(self, rows: int, positions: int) -> float:
        """The KV cache ``rows`` decoding rows of ``positions`` positions take (every layer full size)."""
        config = self.model.config
        config = getattr(config, "text_config", None) or config
        heads = getattr(config, "num_attention_heads", 1)
        head_dim = getattr(config, "head_dim", None) or getattr(config, "hidden_size", 0) // max(heads, 1)
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        per_position = getattr(config, "num_hidden_layers", 0) * 2 * kv_heads * head_dim * self.model.dtype.itemsize
        return float(rows * positions * per_position)

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

    @torch.no_grad()
    def first_token_support(self, requests: list[Any], disable_tqdm: bool = False) -> list[dict[float, int]]:
        """calbench's own request kind (``policy.FIRST_TOKEN_SUPPORT``): per request ``(context,)``,
        the top-p support sizes of the next-token distribution after the context, tokenized
        as ``generate_until`` tokenizes it (the distribution the first answer token is drawn from)."""
        from calbench.metrics.openended import support_sizes

        sizes: dict[str, dict[float, int]] = {}
        for request in tqdm(requests, desc="calbench-hf first-token support", disable=disable_tqdm):
            context = request.args[0]
            if context not in sizes:  # the repeats of a prompt are scored once
                ids, _ = self.tok_batch_encode([context], truncation=self.truncation)
                logits = self.model(ids.to(self.device)).logits[0, -1].float()
                sizes[context] = support_sizes(torch.log_softmax(logits, dim=-1).exp().double().cpu().numpy())
        return [sizes[r.args[0]] for r in requests]

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

        def emit(batch: list[int], rows: list[list[int]], until: list[str]) -> None:
            for i, row in zip(batch, rows, strict=True):
                out[i] = self._decode(row, until)
                self.cache_hook.add_partial("generate_until", requests[i].args, out[i])

        # plain sampling, per setting: prompts waiting to be decoded side by side, up to
        # sampling_batch_size samples in all (a prompt's repeats beyond that start a new batch)
        waiting: dict[str, _SideBySide] = {}

        def flush(key: str) -> None:
            side = waiting.pop(key)
            prompts = [prompt for prompt, _ in side.parts]
            per_prompt = sample_many(
                self.model,
                prompts,
                [len(b) for _, b in side.parts],
                side.max_gen_toks,
                side.temperature,
                self._stop_ids(),
            )
            for (_, batch), rows in zip(side.parts, per_prompt, strict=True):
                emit(batch, rows, side.until)
            pbar.update(side.samples)  # once per batch: tqdm draws at most every 0.1 s

        for (context, key), indices in groups.items():
            kwargs = normalize_gen_kwargs(requests[indices[0]].args[1], self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = kwargs.pop("max_gen_toks")
            prompt, _ = self.tok_batch_encode(
                [context], left_truncate_len=self.max_length - max_gen_toks, truncation=self.truncation
            )
            prompt = prompt.to(self.device)
            temperature = _sampler_temperature(kwargs, until, eos)
            for start in range(0, len(indices), self.sampling_batch_size):
                batch = indices[start : start + self.sampling_batch_size]
                if temperature is None:
                    emit(batch, self._generate(prompt, len(batch), max_gen_toks, until, kwargs), until)
                    pbar.update(len(batch))
                    continue
                if key in waiting and not waiting[key].fits(self, prompt.shape[1], len(batch)):
                    flush(key)
                side = waiting.setdefault(key, _SideBySide(max_gen_toks, temperature, until))
                side.parts.append((prompt[0], batch))
                side.samples += len(batch)
                side.longest = max(side.longest, prompt.shape[1])
        for key in list(waiting):
            flush(key)
        pbar.close()
        return out

    def enumerate_numeric_answers(self, requests: list[Any], disable_tqdm: bool = False) -> list[Enumeration]:
        """calbench's request kind (``policy.ENUMERATE_ANSWERS``): per request ``(context, generation
        settings, enumeration settings)``, the distribution of the number sampling would return
        (``calbench.backends.enumeration``), under exactly the prompt, stop tokens, token cap and
        decoding that ``generate_until`` uses."""
        if self.think_end_token is not None:
            raise ValueError(
                f"answer enumeration reads answers without reasoning blocks, but this model ends them with "
                f"{self.think_end_token!r}: run the sampling tasks instead"
            )
        eos = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        out = []
        for request in tqdm(requests, desc="calbench-hf answer enumeration", disable=disable_tqdm):
            context, gen_kwargs, settings = request.args
            kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos)
            max_gen_toks = kwargs.pop("max_gen_toks")
            temperature = _sampler_temperature(kwargs, until, eos)
            if not temperature:
                raise ValueError(
                    f"answer enumeration follows plain softmax sampling stopped at EOS only; got {gen_kwargs}"
                )
            prompt, _ = self.tok_batch_encode(
                [context], left_truncate_len=self.max_length - max_gen_toks, truncation=self.truncation
            )
            out.append(
                enumerate_answers(
                    self.model,
                    prompt[0].tolist(),
                    self._token_table(),
                    max_gen_toks,
                    Budget(**settings["budget"]),
                    temperature,
                    answer_space(settings["space"]),
                    decode=partial(self._decode, until=until),
                )
            )
        return out

    @lru_cache(maxsize=1)  # noqa: B019 - one model, one tokenizer
    def _token_table(self) -> TokenTable:
        anchor = self.tokenizer("0", add_special_tokens=False)["input_ids"][-1]
        return TokenTable.build(self.tok_decode, len(self.tokenizer), sorted(self._stop_ids()), anchor)

    def _stop_ids(self) -> set[int]:
        """Tokens that end a sample, as for HF generate: the generation config's EOS ids and the EOT token."""
        ids = self.model.generation_config.eos_token_id
        ids = set(ids if isinstance(ids, list) else [] if ids is None else [ids])
        return ids | {int(self.eot_token_id)}

    def _generate(
        self, prompt: torch.Tensor, n: int, max_gen_toks: int, until: list[str], kwargs: dict[str, Any]
    ) -> list[list[int]]:
        """Any other sampling settings: HF generate, on a copy of the shared prompt cache."""
        rows = prompt.expand(n, -1).contiguous()
        extra = {}
        cache = self._prefill(prompt)
        if cache is not None:
            cache.batch_repeat_interleave(n)
            extra[cache_kwarg(self.model)] = cache
        tokens = self._model_generate(
            context=rows,
            attention_mask=torch.ones_like(rows),
            stop=until,
            max_length=prompt.shape[1] + max_gen_toks,
            **kwargs,
            **extra,
        )
        return [row[prompt.shape[1] :] for row in tokens.tolist()]

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
