"""lm-eval's side of calbench: the task classes and documents the YAML in ``tasks/`` names.

One module per kind of task: ``numeric`` (sampling, and the other sampling protocols),
``likelihood``, ``enumeration`` (sample-free), ``transfer`` (open-ended, MCQ balance,
NoveltyBench) and ``retention`` (the offline capability suite), on ``base``'s
``CalbenchTask``. The YAML names them as ``calbench.harness.<name>``.
"""

from calbench.harness.base import CalbenchTask, keep_all, metric_keys
from calbench.harness.enumeration import ENUMERATION_DEFAULTS, EnumerationTask, enumeration_settings
from calbench.harness.likelihood import LikelihoodTask, likelihood_docs
from calbench.harness.numeric import ProtocolTask, SamplingTask, numeric_docs, protocol_metrics, protocol_summary
from calbench.harness.retention import ArithmeticTask, FormatTask, arithmetic_docs, format_docs, mmlu_docs
from calbench.harness.transfer import MCQTask, NoveltyTask, OpenEndedTask, mcq_docs, noveltybench_docs, open_ended_docs

__all__ = [
    "ENUMERATION_DEFAULTS",
    "ArithmeticTask",
    "CalbenchTask",
    "EnumerationTask",
    "FormatTask",
    "LikelihoodTask",
    "MCQTask",
    "NoveltyTask",
    "OpenEndedTask",
    "ProtocolTask",
    "SamplingTask",
    "arithmetic_docs",
    "enumeration_settings",
    "format_docs",
    "keep_all",
    "likelihood_docs",
    "mcq_docs",
    "metric_keys",
    "mmlu_docs",
    "noveltybench_docs",
    "numeric_docs",
    "open_ended_docs",
    "protocol_metrics",
    "protocol_summary",
]
