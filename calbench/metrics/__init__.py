"""calbench's numbers, as pure functions of answers and laws (no lm-eval, no model).

``sampling`` (W1, the oracle floor, goodness of fit), ``pit`` (PIT distances and KS@N),
``calibration`` (the calibration score), ``likelihood`` (exact KLs over the canonical
space), ``enumeration`` (the sample-free metrics of an enumerated answer distribution),
``prompt_scores`` (one record per prompt, then per family, then per split), ``tails`` (where
the PIT's tails come from), ``protocol_diagnostics``, the transfer and retention scorers
(``mcq``, ``openended``, ``noveltybench``, ``retention``), and ``catalog``: every metric's
name, direction, range and meaning.
"""
