"""``calbench eval`` fails in one line with a non-zero exit, and never loses results silently
(issue 27, cases 14-17)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from calbench.cli import main


def _one_line(capsys, message: str) -> str:
    err = capsys.readouterr().err
    ours = [line for line in err.splitlines() if line.startswith("calbench eval: ")]
    assert len(ours) == 1 and message in ours[0] and "Traceback" not in err, err[-3000:]
    return ours[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "hf", "--tasks", ""], "name the tasks to run with --tasks"),
        (["--model", "hf", "--tasks", " ", ""], "name the tasks to run with --tasks"),
        (
            ["--model", "no-such-backend", "--tasks", "calbench_numeric_quick"],
            "--model no-such-backend: not an lm-eval",
        ),
        (
            ["--model", "hf", "--model_args", "pretrained=nosuchmodel", "--tasks", "calbench_numeric_quick"],
            "pretrained=nosuchmodel: not a folder here, not a calbench catalogue model",
        ),
        (
            ["--model", "hf", "--tasks", "calbench_numeric_quick", "--metadata", '{"calbench_split": "train"}'],
            "--metadata calbench_split: a setting calbench's tasks fix in their YAML",
        ),
        (
            ["--model", "hf", "--tasks", "calbench_numeric_quick", "--metadata", '{"num_samples": -1}'],
            "--metadata num_samples must be a positive integer (at most 100000), got -1",
        ),
        (["--model", "hf", "--tasks", "calbench_numeric_quick", "--metadata", "[1]"], "--metadata"),
        (
            ["--model", "hf", "--tasks", "calbench_numeric_quick", "--num-samples", "1000000000"],
            "--num-samples must be a whole number from 1 to 100000, got 1000000000",
        ),
        (
            [
                "--model",
                "hf",
                "--tasks",
                "calbench_numeric_quick",
                "--metadata",
                '{"num_samples": 100000000000000000000}',
            ],
            "--metadata num_samples must be a positive integer (at most 100000)",
        ),
    ],
)
def test_more_mistakes_get_one_line_before_any_model_loads(argv, message, capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)
    assert main(["eval", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("calbench eval: ") and message in err and "Traceback" not in err, err
    assert err.strip().count("\n") == 0  # one line


@pytest.fixture
def adapters(tmp_path):
    """A NaN adapter and a truncated one."""
    nan, cut = tmp_path / "nan", tmp_path / "cut"
    for folder in (nan, cut):
        folder.mkdir()
        (folder / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 1}))
    save_file(
        {"base_model.model.x.lora_A.weight": torch.tensor([[1.0, float("nan")]])}, nan / "adapter_model.safetensors"
    )
    save_file({"w": torch.ones(64)}, cut / "adapter_model.safetensors")
    data = (cut / "adapter_model.safetensors").read_bytes()
    (cut / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])
    return nan, cut


def test_a_broken_adapter_is_named_in_one_line(tiny_split, adapters, capsys, tmp_path):
    nan, cut = adapters
    for adapter, message in ((nan, "holds NaN or infinite weights"), (cut, "cannot be read")):
        for key in ("peft", "lora_local_path"):
            argv = ["--model", "hf", "--model_args", f"pretrained={tiny_split},{key}={adapter}"]
            assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "-o", str(tmp_path / "o")]) == 2
            line = _one_line(capsys, message)
            assert f"{key}={adapter}" in line


def test_calbench_hf_refuses_a_broken_adapter_itself(tiny_split, adapters):
    """For lm_eval's own CLI too (``--model calbench-hf``), before peft loads it."""
    from calbench.backends.hf import CalbenchHFLM

    with pytest.raises(ValueError, match=r"calbench-hf: peft=.*nan: adapter_model\.safetensors: .* NaN"):
        CalbenchHFLM(pretrained=str(tiny_split), peft=str(adapters[0]))


def test_an_output_folder_that_cannot_be_written_is_refused_before_the_run(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    argv = ["--model", "calbench-oracle", "--tasks", "calbench_numeric_quick", "-o", str(tmp_path / "file" / "out")]
    assert main(["eval", *argv]) == 2
    _one_line(capsys, "cannot write there")


def test_a_model_path_too_long_for_lm_evals_folder_name_is_refused(tiny_split, capsys, tmp_path):
    deep = tmp_path
    for i in range(3):  # each name legal, the path as one sanitized name not (lm-eval's <output>/<model>/)
        deep = deep / (f"{i}" * 100)
    deep.parent.mkdir(parents=True)
    deep.symlink_to(tiny_split)
    argv = ["--model", "hf", "--model_args", f"pretrained={deep}", "--tasks", "calbench_numeric_quick"]
    assert main(["eval", *argv, "-o", str(tmp_path / "o")]) == 2
    _one_line(capsys, "longer than a file name may be (255)")


@pytest.mark.integration
def test_results_lm_eval_could_not_save_are_a_failure_not_a_success(capsys, tmp_path, monkeypatch):
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    def could_not_save(self, *args, **kwargs):  # what lm-eval does when the write fails: it logs and goes on
        return None

    monkeypatch.setattr(EvaluationTracker, "save_results_aggregated", could_not_save)
    argv = ["--model", "calbench-oracle", "--tasks", "calbench_numeric_quick", "--num-samples", "2"]
    assert main(["eval", *argv, "-o", str(tmp_path / "o")]) == 2
    _one_line(capsys, "this run's results are lost")


@pytest.mark.integration
def test_an_error_inside_the_run_is_one_line_too(capsys, tmp_path):
    argv = ["--model", "calbench-oracle", "--tasks", "calbench_numeric_quick", "--metadata", '{"num_samples": "x"}']
    assert main(["eval", *argv, "-o", str(tmp_path / "o")]) == 2
    _one_line(capsys, "num_samples must be a positive integer")


def test_an_output_json_file_name_finds_its_results(tmp_path):
    from calbench.lm_eval_io import latest_results

    (tmp_path / "mine_2026-12-03T08-19-58.843839.json").write_text("{}")
    (tmp_path / "other.json").write_text("{}")
    assert latest_results(tmp_path / "mine.json") == tmp_path / "mine_2026-12-03T08-19-58.843839.json"
    assert latest_results(tmp_path / "nothing.json") is None


@pytest.mark.integration
def test_one_absurd_answer_never_loses_the_run(tmp_path):
    """A stand-in model answering 1, 2 and 1e80 in turn (issue 36, case 2): the evaluation writes
    its results; the moment metrics are finite or NaN, the others as for any answers."""
    from lm_eval.api.registry import MODEL_REGISTRY, register_model

    from calbench import evaluation
    from calbench.backends.references import ReferenceLM
    from calbench.lm_eval_io import latest_results

    class Absurd(ReferenceLM):
        name = "calbench-test-absurd"
        turn = 0

        def answer(self, target):
            self.turn += 1
            return ("1", "2", "1e80")[self.turn % 3]

    if Absurd.name not in MODEL_REGISTRY:
        register_model(Absurd.name)(Absurd)
    evaluation.evaluate(Absurd.name, ["calbench_numeric_quick"], num_samples=9, output_path=tmp_path)
    results = latest_results(tmp_path)
    assert results is not None
    overall = json.loads(results.read_text())["results"]["calbench_numeric_quick"]
    assert overall["valid_rate,samples"] > 0.5  # bounded laws refuse 2 or 1e80; the others take them
    # A law with a variance sees a sample variance of about 1e159 of its own: huge, and finite.
    assert 1e100 < overall["variance_error,samples"] < 1e308


# ---- issue 49, cases 6, 9 and 10: one line, exit 2, before a model loads ----------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (  # case 6: the oracle ran and its results were filed under the model's name
            ["--model", "calbench-oracle", "--model_args", "pretrained=HuggingFaceTB/SmolLM2-135M-Instruct"],
            "--model calbench-oracle is a reference system and takes no model: pretrained=HuggingFaceTB/SmolLM2",
        ),
        (["--model", "calbench-collapsed", "--model_args", "peft=x"], "takes no model: peft=x"),
        (
            ["--model", "hf", "--model_args", "pretrained={model},dtype=float13"],
            "dtype=float13: not a torch dtype",
        ),  # 9
        (["--model", "calbench-hf", "--model_args", "pretrained={model},dtype=5"], "dtype=5: not a torch dtype"),
        (["--model", "hf", "--model_args", "pretrained={file}"], "pretrained={file}: a file, not a folder"),  # 10
        (["--model", "hf", "--model_args", "pretrained={model},peft={file}"], "peft={file}: a file, not a folder"),
    ],
)
def test_a_reference_with_a_model_a_bad_dtype_or_a_model_file_is_one_line(argv, message, capsys, tmp_path, tiny_split):
    """A real (tiny) model folder: without the checks, dtype=float13 got as far as loading it."""
    (tmp_path / "weights.gguf").write_text("")
    names = {"model": tiny_split, "file": tmp_path / "weights.gguf"}
    argv = [a.format(**names) for a in argv]
    assert main(["eval", *argv, "--tasks", "calbench_numeric_quick", "--output_path", str(tmp_path / "out")]) == 2
    _one_line(capsys, message.format(**names))
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("results_*.json"))
