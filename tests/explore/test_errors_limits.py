"""Silent or endless failures made loud: absurd sizes fail a limit check before any work
(``stage memory|trace|eval`` and study files), a misspelled flavor, preset or hardware path in a
study file is an error at load time with close names, ``--resume`` needs a recorded study, and
``--trials`` is the total budget of a resumed study."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

import pytest

from stage_core.errors import ConfigError
from stage_explore import limits
from stage_explore.cli import main
from stage_explore.records import count_records
from stage_explore.search import explore
from stage_explore.study import parse_study
from stage_explore.study.loader import bundled_studies, load_study

support = import_module(
    f"{__package__}.test_search_support" if __package__ else "test_search_support"
)
WORKLOAD = ["--model", "gpt3-1.3b", "--layers", "2"]


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and len(err.splitlines()) == 1, err
    return err


@pytest.fixture
def no_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if a command starts lowering: the limit check must come first."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("lowering started before the limit check")

    for module in ("memory", "trace", "eval"):
        target = import_module(f"stage_explore.cli.{module}")
        if hasattr(target, "lower"):
            monkeypatch.setattr(target, "lower", forbidden)
    monkeypatch.setattr("stage_explore.cli.options.load_model", forbidden)


@pytest.mark.parametrize("command", ["memory", "trace", "eval"])
@pytest.mark.parametrize(
    ("options", "needle"),
    [
        (["--dp", str(10**9)], f"expected at most {limits.MAX_GPUS:,}"),
        (["--dp", "1024", "--tp", "1024", "--pp", "2"], "GPUs (--dp × --tp × --cp × --pp)"),
        (["--seq-len", str(10**11)], f"--seq-len: expected at most {limits.MAX_SEQ_LEN:,}"),
        (["--layers", str(10**6)], f"--layers: expected at most {limits.MAX_LAYERS:,}"),
        (["--global-batch", str(10**8)], "--global-batch: expected at most"),
    ],
)
def test_absurd_sizes_fail_before_any_work(
    command: str,
    options: list[str],
    needle: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    no_lowering: None,
) -> None:
    extra = {"trace": ["--out", str(tmp_path / "t")], "eval": ["--system", "a100-80gb"]}
    workload = ["--model", "gpt3-1.3b"] if "--layers" in options else WORKLOAD
    assert main([command, *workload, *options, *extra.get(command, [])]) == 2
    assert needle in _error(capsys)
    assert not (tmp_path / "t").exists()  # nothing written either


def test_sizes_at_the_limit_pass_the_check() -> None:
    limits.check_sizes(
        {
            "gpus": limits.MAX_GPUS,
            "seq_len": limits.MAX_SEQ_LEN,
            "layers": limits.MAX_LAYERS,
            "global_batch": limits.MAX_GLOBAL_BATCH,
        }
    )
    with pytest.raises(ConfigError, match=r"^num_gpus: expected at most 1,048,576"):
        limits.check_sizes({"gpus": limits.MAX_GPUS + 1}, names={"gpus": "num_gpus"})


def test_per_rank_trace_files_are_limited_symmetric_is_not(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_lowering: None
) -> None:
    dp = 2 * limits.MAX_RANK_FILES
    argv = ["trace", *WORKLOAD, "--dp", str(dp), "--out", str(tmp_path / "t")]
    assert main(argv) == 2
    assert f"got {dp:,}; use --format symmetric" in _error(capsys)


# ---------------------------------------------------------------- study files


def _study_text(**replacements: str) -> str:
    text = support.study_text(trials=10)
    for old, new in replacements.items():
        assert old in text, old
        text = text.replace(old, new)
    return text


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ('flavor = "llama3-8b"', 'flavor = "llama3-8c"', "[model] flavor: unknown model flavor"),
        ('preset = "h100-80gb"', 'preset = "h100-80"', "[system] preset: unknown system"),
        ("sequence_length = 4096", "sequence_length = 100000000000", "expected at most 16,777,216"),
        ("global_batch = 64", "global_batch = 100000000", "[workload] global_batch: expected"),
    ],
)
def test_study_names_and_sizes_are_checked_at_load_time(
    old: str, new: str, needle: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as error:
        parse_study(_study_text(**{old: new}), tmp_path / "s.toml")
    message = str(error.value)
    assert needle in message and message.startswith(f"{tmp_path / 's.toml'}:")
    if "flavor" in needle:
        assert "llama3-8b" in message  # the close name is offered
    if "preset" in needle:
        assert "h100-80gb" in message


def test_misspelled_hardware_path_is_an_error_at_load_time(tmp_path: Path) -> None:
    extra = '[system.search]\n"accelerator.memory_byte" = [42949672960, 85899345920]\n'
    with pytest.raises(
        ConfigError, match=r"\[system.search\] accelerator.memory_byte: .*memory_bytes"
    ):
        parse_study(support.study_text(trials=10, extra=extra), tmp_path / "s.toml")


def test_num_gpus_above_the_limit_in_a_study(tmp_path: Path) -> None:
    text = support.study_text(trials=10, space=support.SPACE.replace("32]", "4194304]"))
    with pytest.raises(ConfigError, match=r"\[space\] num_gpus: expected at most 1,048,576"):
        parse_study(text, tmp_path / "s.toml")


def test_misspelled_flavor_from_the_command_exits_2_before_any_trial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "study.toml"
    study.write_text(_study_text(**{'flavor = "llama3-8b"': 'flavor = "lama3-8b"'}))
    assert main(["explore", str(study), "--out", str(tmp_path / "out")]) == 2
    assert "unknown model flavor 'lama3-8b'; close names: llama3-8b" in _error(capsys)
    assert not (tmp_path / "out" / "demo").exists()


# ---------------------------------------------------------------- bundled studies


def test_every_bundled_study_loads() -> None:
    studies = bundled_studies()
    assert "quickstart" in studies and len(studies) >= 5
    for path in studies.values():
        assert path.parent.name == "studies" and path.parent.parent.name == "stage_explore"
        assert load_study(path).name  # every bundled study is valid as shipped


def test_a_bundled_study_is_found_by_name_and_an_unknown_one_lists_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no studies/ folder here: the package's copy is used
    assert main(["explore", "quickstart", "--out", str(tmp_path), "--trials", "0"]) == 2
    assert "--trials: expected a positive integer" in _error(capsys)
    assert main(["explore", "quickstrat", "--out", str(tmp_path)]) == 2
    message = _error(capsys)
    assert "quickstrat: no such study file, and not a bundled study (did you mean quickstart?)" in (
        message
    )
    assert all(name in message for name in bundled_studies())
    from stage_explore.study.loader import resolve_study

    assert resolve_study("quickstart") == bundled_studies()["quickstart"]
    assert resolve_study("quickstart.toml") == bundled_studies()["quickstart"]
    (tmp_path / "quickstart.toml").write_text("# a local file wins\n")
    assert resolve_study("quickstart.toml") == Path("quickstart.toml")


# ---------------------------------------------------------------- resume semantics


def test_resume_needs_a_recorded_study(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=10))
    (tmp_path / "empty" / "demo").mkdir(parents=True)
    (tmp_path / "other" / "demo").mkdir(parents=True)
    (tmp_path / "other" / "demo" / "notes.txt").write_text("not a study")
    for out in (tmp_path / "empty", tmp_path / "other"):
        assert main(["explore", str(study), "--out", str(out), "--resume"]) == 2
        message = _error(capsys)
        assert f"--resume: {out / 'demo'} holds no recorded study" in message
    assert main(["explore", str(study), "--out", str(tmp_path / "missing"), "--resume"]) == 2
    assert "holds no recorded study" in _error(capsys)


def test_trials_is_the_total_budget_of_a_resumed_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "study.toml"
    study.write_text(support.study_text(trials=20))
    spec = parse_study(study.read_text(), study)
    explore(spec, out=tmp_path / "out", executor_factory=support.InlineExecutor)
    folder = tmp_path / "out" / "demo"
    parts = sorted(folder.glob("part-*"))
    argv = ["explore", str(study), "--out", str(tmp_path / "out"), "--resume"]
    for budget in (["--trials", "10"], ["--trials", "20"], []):  # below, at, the study's own
        assert main([*argv, *budget]) == 0
        printed = capsys.readouterr().out.replace(str(tmp_path), "<tmp>")  # pytest-820/ …
        assert "20 trials already recorded" in printed and "nothing to run" in printed
        assert "20/" not in printed and "/10" not in printed
    assert sorted(folder.glob("part-*")) == parts and count_records(folder) == 20
