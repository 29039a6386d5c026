"""calbench.cache: simulated nulls kept on disk are the values a fresh simulation gives."""

from __future__ import annotations

import numpy as np

from calbench import cache
from calbench.families import make_target
from calbench.metrics import pit


def test_a_simulated_entry_is_computed_once_then_read_and_a_damaged_one_is_simulated_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"values": np.array([0.5, 1.5]), "counts": np.array([3, 1])}

    first = cache.simulated("a key", compute)
    again = cache.simulated("a key", compute)
    assert len(calls) == 1 and all(np.array_equal(first[k], again[k]) for k in first)
    (path,) = (tmp_path / "simulated").iterdir()
    path.write_bytes(b"not an npz")
    assert np.array_equal(cache.simulated("a key", compute)["values"], first["values"]) and len(calls) == 2
    cache.simulated("another key", compute)
    assert len(calls) == 3 and len(list((tmp_path / "simulated").iterdir())) == 2


def test_an_unwritable_cache_costs_time_not_the_result(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("CALBENCH_CACHE", str(blocker))  # a file where the folder should be
    assert cache.simulated("k", lambda: {"x": np.arange(3)})["x"].tolist() == [0, 1, 2]


def test_the_discrete_ks_null_read_back_is_the_simulated_one(tmp_path, monkeypatch):
    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    target = make_target("poisson", {"lambda": 4.0})
    fresh = pit._discrete_ks_null.__wrapped__(target, 100, 6000)
    assert len(list((tmp_path / "simulated").iterdir())) == 1
    read = pit._discrete_ks_null.__wrapped__(target, 100, 6000)
    assert read.dtype == fresh.dtype and np.array_equal(read, fresh) and np.all(np.diff(fresh) >= 0)
    # what the simulation was before the cache: the same seeded draws, the KS column, sorted
    rng = np.random.default_rng(pit.seed_for("ks null", target.key, 100, 6000))
    parts = [
        pit.integer_pit_w1_ks(np.rint(target.law.rvs(size=(min(5000, 6000 - i), 100), random_state=rng)), target)[1]
        for i in range(0, 6000, 5000)
    ]
    assert np.array_equal(read, np.sort(np.concatenate(parts)))


def test_the_floors_read_back_are_the_simulated_ones(tmp_path, monkeypatch):
    from calbench.metrics import sampling

    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    for target in (make_target("poisson", {"lambda": 4.0}), make_target("gaussian", {"mu": 1.0, "sigma": 2.0})):
        fresh = (pit.pit_floor.__wrapped__(target, 30, 500), sampling.oracle_floor.__wrapped__(target, 30, 500))
        read = (pit.pit_floor.__wrapped__(target, 30, 500), sampling.oracle_floor.__wrapped__(target, 30, 500))
        assert read == fresh
        # by hand, as the floor was computed before the cache: the median of the seeded replicates
        key = "continuous" if not target.integer else target.key
        per_rep = pit._exact_pit_w1(target, 30, 500, pit.seed_for("pit floor", key, 30, 500))
        assert fresh[0].median == float(np.quantile(per_rep, 0.5))
    assert len(list((tmp_path / "simulated").iterdir())) == 4
