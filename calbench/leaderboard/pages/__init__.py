"""The pages, rendered from run records alone (``calbench leaderboard render``).

* ``numbers``: the calibration score and a record's other numbers (pure), each record scored once;
* ``board``: the leaderboard's tables (markdown and CSV) and the README's headline block;
* ``plots``: the ranking chart, PIT histograms and per-family sample plots (matplotlib);
* ``card``: the evaluation section of an adapter's model card, and its ``model-index``;
* ``export``: a record as an Every Eval Ever 0.3.0 file, and a card's ``model-index`` numbers;
* ``protocol_page``: every system under every sampling protocol;
* ``tradeoff``: calibration gained against retention lost, one point per adapter;
* ``curve_page``: a learning curve's page and plot;
* ``tails_page``: where each row's PIT tails come from;
* ``quotes``: the numbers hand-written prose quotes from the rendered tables, printed from them;
* ``render``: all of the above, each record scored once (``calbench leaderboard render``).
"""
