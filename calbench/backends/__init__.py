"""calbench's lm-eval backends, and every model calbench loads: ``calbench-hf`` (``hf``: its
sampler, tree attention and the answer enumeration search), the reference systems
(``references``: an exact sampler and a collapsed one), calbench's API backends (``api``:
n samples per request), and NoveltyBench's full scorer's hub
models (``noveltybench``).

lm-eval has no plugin discovery for models: ``register()`` adds them to its registry
in-process, which ``calbench eval`` and ``calbench demo`` do before handing over to lm-eval.
"""

from __future__ import annotations

# calbench's API backends (``api``): lm-eval's local ones, n samples per request, all concurrent
API_MODELS = {
    "calbench-chat-completions": "calbench.backends.api:ChatCompletions",
    "calbench-completions": "calbench.backends.api:Completions",
}


def register() -> None:
    """Add calbench's models to lm-eval's model registry (idempotent): the references, and
    calbench-hf as a name lm-eval imports when it is asked for (as lm-eval lists its own models),
    so that a run of a reference system never loads torch and transformers."""
    import lm_eval.models  # noqa: F401 - lm-eval only imports its own models into an empty registry
    from lm_eval.api.registry import MODEL_REGISTRY, register_model

    from calbench.backends.references import MODELS

    for name, cls in MODELS.items():
        if name not in MODEL_REGISTRY:
            register_model(name)(cls)
    if "calbench-hf" not in MODEL_REGISTRY:
        MODEL_REGISTRY.register("calbench-hf", target="calbench.backends.hf:CalbenchHFLM")
    for name, target in API_MODELS.items():
        if name not in MODEL_REGISTRY:
            MODEL_REGISTRY.register(name, target=target)
