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


def test_a_conversion_parses_the_gguf_file_once(tmp_path):
    """transformers builds a GGUF reader for the tokenizer, the config and the weights; parsing
    Gemma's 262k-token vocabulary three times was most of its conversion. Inside the conversion
    one reader serves all three; outside it, each call parses afresh again."""
    import gguf
    import numpy as np

    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.arange(6, dtype=np.float32).reshape(2, 3))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    original = gguf.GGUFReader
    with model_catalogue._gguf_parsed_once():
        first = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is first
        assert first.get_field("llama.block_count").contents() == 1
        assert np.array_equal(first.tensors[0].data, np.arange(6, dtype=np.float32).reshape(2, 3))
    assert gguf.GGUFReader is original
    assert gguf.GGUFReader(path) is not first
