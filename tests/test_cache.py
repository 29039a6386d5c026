"""calbench.cache: simulated nulls kept on disk are the values a fresh simulation gives."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

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


# ---- issue 49, cases 3 and 4: a damaged or edited entry is a missing one --------------------


def _flip(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _halve_arrays(path):
    """Case 4's edit: every array halved, the key kept (the old format had no checksum to break)."""
    with np.load(path, allow_pickle=False) as stored:
        named = {k: stored[k] for k in stored.files}
    edited = {k: (v / 2 if k not in ("key", "content_sha256") and v.dtype.kind == "f" else v) for k, v in named.items()}
    np.savez(path, **edited)


def _wrong_shape(path):
    """An array of another shape, written with a checksum that matches it (a forged entry)."""
    with np.load(path, allow_pickle=False) as stored:
        named = {k: stored[k] for k in stored.files if k not in ("content_sha256",)}
    arrays = {k: v[:-1] if v.ndim == 1 else v.reshape(1, -1)[:, :0] for k, v in named.items() if k != "key"}
    np.savez(path, key=named["key"], content_sha256=np.array(cache.content_sha256(arrays)), **arrays)


DAMAGES = {
    "cut to half its size": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "cut by 10 bytes": lambda p: p.write_bytes(p.read_bytes()[:-10]),
    "one byte flipped": _flip,
    "arrays halved, key kept": _halve_arrays,
    "an array of the wrong shape": _wrong_shape,
    "empty": lambda p: p.write_bytes(b""),
}


def _uses(target):
    """Each kind of entry scoring reads, through the function that reads it (its in-process cache
    bypassed): the W1 and PIT floors, an integer law's KS null and a q95 the table lacks."""
    return {
        "w1 floor": lambda: sampling_floor(target),
        "pit floor": lambda: pit.pit_floor.__wrapped__(target, 20, 300),
        "ks null": lambda: pit._discrete_ks_null.__wrapped__(target, 20, 300).tolist(),
        "q95": lambda: pit.exact_q95.__wrapped__(target, 60),
    }


def sampling_floor(target):
    from calbench.metrics import sampling

    return sampling.oracle_floor.__wrapped__(target, 20, 300)


# Every damage to each cheap entry; a q95 (seconds to simulate) with case 4's edit and a cut.
CASES = [(use, damage) for use in ("w1 floor", "pit floor", "ks null") for damage in DAMAGES]
CASES += [("q95", "arrays halved, key kept"), ("q95", "cut to half its size")]


@pytest.mark.parametrize(("use", "damage"), CASES)
def test_a_damaged_entry_is_simulated_afresh_rewritten_and_said_once(tmp_path, monkeypatch, capsys, damage, use):
    """Case 3: one cut or flipped entry made every evaluation reading it exit 1 (zipfile.BadZipFile,
    a TypeError for the wrong shape), and it stayed. Case 4: arrays halved under their key changed
    scores silently (exact_q95(binomial(25, 0.5), 60) 0.0741 -> 0.0370)."""
    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    read = _uses(make_target("binomial", {"n": 25, "p": 0.5}))[use]
    fresh = read()
    (entry,) = (tmp_path / "simulated").iterdir()
    good = entry.read_bytes()
    capsys.readouterr()
    DAMAGES[damage](entry)
    assert entry.read_bytes() != good
    assert read() == fresh  # the value a fresh simulation gives
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"the cached simulation {entry} cannot be used" in err and "simulated afresh" in err
    assert entry.read_bytes() == good  # rewritten: the next reader finds it whole and says nothing
    assert read() == fresh and capsys.readouterr().err == ""


def test_each_entry_carries_the_checksum_of_its_content(tmp_path, monkeypatch):
    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    arrays = {"values": np.array([0.5, 1.5]), "counts": np.array([3, 1])}
    cache.simulated("k", lambda: arrays)
    (entry,) = (tmp_path / "simulated").iterdir()
    with np.load(entry, allow_pickle=False) as stored:
        assert str(stored["content_sha256"]) == cache.content_sha256(arrays)
    # the checksum covers names, types and shapes as well as the bytes
    assert cache.content_sha256({"values": arrays["values"].astype(np.float32)}) != cache.content_sha256(
        {"values": arrays["values"]}
    )
    assert cache.content_sha256({"a": np.zeros(4)}) != cache.content_sha256({"a": np.zeros((2, 2))})
    assert cache.content_sha256({"a": np.zeros(4)}) != cache.content_sha256({"b": np.zeros(4)})


@pytest.mark.integration
def test_an_evaluation_over_a_damaged_cache_gives_the_numbers_of_a_clean_one(tmp_path):
    """Case 3 by hand: an oracle run, one of its entries cut to half, the same run again (each a
    fresh process, as users run them): exit 0, the same numbers, one line naming the entry; the
    entry healed for every later run."""
    env = {**os.environ, "CALBENCH_CACHE": str(tmp_path / "cache")}

    def run(out):
        argv = ["eval", "--model", "calbench-oracle", "--tasks", "calbench_numeric_quick", "--num-samples", "20"]
        done = subprocess.run(
            [sys.executable, "-m", "calbench", *argv, "--output_path", str(tmp_path / out)],
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        (results,) = (tmp_path / out).rglob("results_*.json")
        return json.loads(results.read_text())["results"], done.stderr

    first, _ = run("a")
    entries = sorted((tmp_path / "cache" / "simulated").iterdir())
    assert len(entries) > 10
    victim = entries[len(entries) // 2]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    again, err = run("b")
    assert again == first
    assert err.count("cannot be used") == 1 and str(victim) in err
    third, err = run("c")
    assert third == first and "cannot be used" not in err
