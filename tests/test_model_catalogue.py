"""The model catalogue's first use: one process converts, any other started meanwhile waits."""

from __future__ import annotations

import threading
import time

from calbench import model_catalogue


def test_two_processes_asking_at_once_convert_the_model_once(tmp_path, monkeypatch):
    """Parallel test workers (or two commands) asked for an unconverted model together: both
    converted it through one ``.partial`` folder. Now the second waits for the first's lock,
    then finds the folder ready."""
    monkeypatch.setenv("CALBENCH_CACHE", str(tmp_path))
    monkeypatch.setattr(model_catalogue, "gguf_file", lambda name: tmp_path / f"{name}.gguf")
    inside, converted = [], []

    def convert(gguf, out):
        inside.append(1)
        assert len(inside) == 1, "two conversions at once"
        time.sleep(0.3)
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")
        converted.append(out)
        inside.pop()
        return out

    monkeypatch.setattr(model_catalogue, "convert", convert)
    found: list = []
    threads = [threading.Thread(target=lambda: found.append(model_catalogue.model_path())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(converted) == 1
    assert found == [tmp_path / "models" / model_catalogue.DEFAULT_MODEL] * 2
