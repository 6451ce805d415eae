"""tune/cli.py: help, exit codes (0 done, 2 bad input with nothing written, 1 failure or Ctrl-C), the read-only
commands, and a --smoke-test sweep end to end followed by status."""
from __future__ import annotations

import pytest
import ray

from tune.cli import main

FLAGS = ("--num-samples", "--search", "--scheduler", "--max-epochs", "--grace-period", "--reduction-factor",
         "--max-concurrent", "--cpus-per-trial", "--gpus-per-trial", "--metric", "--mode", "--seed", "--storage",
         "--name", "--address", "--dashboard", "--no-dashboard", "--strict", "--set", "--warm-start", "--smoke-test",
         "--workers-per-trial", "--rungs")
TOY = """description: cli toy
base: {dataset: toy, model: mlp, embedding_size: 16, epochs: 2, warmup_epochs: 0, batch_size: 128}
params:
  normaliser.kind: {choice: [none, xbn]}
"""
DELAY = TOY.replace("normaliser.kind: {choice: [none, xbn]}", "normaliser.delay_epochs: {int: [0, 1]}")


def test_help_lists_every_flag_with_examples(capsys):
    assert main(["--help"]) == 0
    top = capsys.readouterr().out
    for command in ("sweep", "resume", "spaces", "show-space", "status", "train", "confirm", "report"):
        assert command in top
    assert main(["sweep", "--help"]) == 0
    text = capsys.readouterr().out
    assert "examples:" in text and "xbm-tune sweep quickstart" in text
    for flag in FLAGS:
        assert flag in text, flag
    for group in ("search:", "early stopping:", "resources and faults:", "storage:", "cluster:", "training config:"):
        assert group in text


@pytest.mark.parametrize("extra, space", [
    (["--search", "bayes"], TOY),
    (["--scheduler", "median"], TOY),
    (["--set", "lr_typo=1"], TOY),
    (["--set", "lr"], TOY),
    (["--set", "memory.ratio=3"], TOY),
    (["--max-epochs", "2", "--grace-period", "3"], TOY),
    (["--num-samples", "0"], TOY),
    (["--gpus-per-trial", "1.5"], TOY),
    (["--mode", "maximise"], TOY),
    (["--search", "random", "--warm-start", "/nonexistent"], TOY),
    (["--strict"], DELAY),
    (["--name", "a/b"], TOY),
    (["--rungs", "schedule"], TOY),  # 2 epochs: no LR drop, no delay to place a rung at
    ([], "missing_space_name"),
])
def test_bad_input_exits_2_and_writes_nothing(tmp_path, capsys, extra, space, ray_down):
    if space.startswith("description"):
        (tmp_path / "space.yaml").write_text(space)
        space = str(tmp_path / "space.yaml")
    code = main(["sweep", space, "--storage", str(tmp_path / "out"), "--no-dashboard", *extra])
    assert code == 2
    assert "error" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert not ray.is_initialized()  # nothing started


def test_read_only_commands(tmp_path, capsys):
    assert main(["spaces"]) == 0
    assert "quickstart" in capsys.readouterr().out
    assert main(["show-space", "quickstart", "--set", "epochs=3"]) == 0
    assert "normaliser.kind" in capsys.readouterr().out
    assert main(["show-space", "no_such_space"]) == 2
    assert main(["status", str(tmp_path / "nothing")]) == 2
    assert main(["resume", str(tmp_path / "nothing"), "--no-dashboard"]) == 2
    assert "not a sweep folder" in capsys.readouterr().err


@pytest.mark.slow
def test_smoke_sweep_then_status_then_the_name_is_taken(ray_session, tmp_path, capsys):
    (tmp_path / "space.yaml").write_text(TOY)
    argv = ["sweep", str(tmp_path / "space.yaml"), "--smoke-test", "--no-dashboard", "--storage",
            str(tmp_path / "out"), "--name", "smoke", "--max-concurrent", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "best trial (by its best epoch):" in out and f"Parquet: {tmp_path}/out/smoke/results/trials.parquet" in out
    assert (tmp_path / "out" / "smoke" / "results" / "sweep.json").is_file()
    assert main(["status", str(tmp_path / "out" / "smoke")]) == 0
    table = capsys.readouterr().out
    assert "sweep smoke: 2 trial(s)" in table and "best_recall_at_1" in table and "normaliser.kind" in table
    assert main(argv) == 2  # an existing experiment name is refused unless resuming
    assert "already exists" in capsys.readouterr().err


@pytest.mark.parametrize("statuses, code", [
    (["failed", "failed"], 1),
    (["failed", "stopped_early"], 0),
    (["failed", "completed"], 0),
])
def test_sweep_exits_1_only_when_every_trial_failed(tmp_path, capsys, monkeypatch, statuses, code):
    """Bug caught: a sweep whose every trial failed exiting 0 (a scheduler or CI would take it as done), or
    one with an early-stopped trial (ASHA working as designed) exiting 1. The sweep itself is replaced by its
    outcome: what is tested is the command's reading of the trials table."""
    import pandas as pd

    from tune.driver import sweep
    from tune.results.record import SweepOutcome

    trials = pd.DataFrame({"trial_id": [f"t{i}" for i in range(len(statuses))], "status": statuses,
                           "trial_name": "x", "best_recall_at_1": [float("nan")] + [0.5] * (len(statuses) - 1),
                           "best_epoch": 1})
    ran = []
    monkeypatch.setattr(sweep, "run_sweep", lambda plan: ran.append(plan) or SweepOutcome(
        plan.experiment_uri, plan.results_uri, trials, "recall_at_1", "max"))
    (tmp_path / "space.yaml").write_text(TOY)
    assert main(["sweep", str(tmp_path / "space.yaml"), "--storage", str(tmp_path / "out"), "--no-dashboard"]) == code
    assert len(ran) == 1
    captured = capsys.readouterr()
    assert ("every trial failed: see the error column of trials.parquet" in captured.err) == (code == 1)
    assert f"trials: {', '.join(f'{statuses.count(s)} {s}' for s in sorted(set(statuses)))}" in captured.out


# ---- bad data named (issue 17) ---------------------------------------------------------------------
@pytest.mark.parametrize("command", [["status"], ["report"], ["resume", "--no-dashboard"],
                                     ["confirm", "--dry-run", "--no-dashboard"]])
def test_a_folder_that_is_no_sweep_exits_2_naming_it(tmp_path, capsys, command):
    """Bug caught: ``report`` on a folder that is no sweep exiting 1 (a failure) while the other commands
    exit 2 (bad input), or any of them writing into the folder."""
    folder = tmp_path / "photos"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a sweep")
    assert main([command[0], str(folder), *command[1:]]) == 2
    assert str(folder) in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_a_truncated_trials_parquet_is_named_by_status_report_and_load(tmp_path, capsys):
    """Bug caught: ``status`` failing with "Could not open Parquet input source '<Buffer>'" (no file named),
    ``report`` writing a report over trials rebuilt as if nothing were wrong (or exiting 1), and
    ``analysis.load`` leaving the file unnamed."""
    import analysis
    from analysis.loader import SweepReadWarning

    from .results.test_contract_roundtrip import written_sweep

    folder = written_sweep(tmp_path)
    path = folder / "results" / "trials.parquet"
    path.write_bytes(path.read_bytes()[:200])
    for command in ("status", "report"):
        assert main([command, str(folder)]) == 2
        err = capsys.readouterr().err
        assert str(path) in err and "unreadable" in err, command
    assert not (folder / "report.md").exists()
    with pytest.warns(SweepReadWarning, match=str(path)):
        sweep = analysis.load(folder)
    assert [p.path for p in sweep.problems if p.unreadable] == [str(path)]


@pytest.mark.parametrize("debug", ["1", ""])
def test_an_unexpected_error_shows_its_traceback_with_xbm_tune_debug(tmp_path, capsys, monkeypatch, debug):
    """Bug caught: every unexpected error reduced to one line, so a user cannot send a traceback with a bug
    report, or the one line not saying how to get it."""
    from tune.results import status
    def broken(path):
        raise RuntimeError("boom inside status")

    monkeypatch.setattr(status, "load_status", broken)
    monkeypatch.setenv("XBM_TUNE_DEBUG", debug)
    assert main(["status", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert ("Traceback (most recent call last)" in err and "in broken" in err) == (debug == "1")
    assert "RuntimeError: boom inside status" in err
    assert ("set XBM_TUNE_DEBUG=1 to see the traceback" in err) == (debug == "")


def test_sweep_flags_for_objectives_guards_and_budgets_reach_the_options():
    """Bug caught: a repeated --metric keeping only the last one, --no-stop-collapsed or the budgets
    parsed but never reaching SweepOptions (the sweep then runs without them), 2h read as seconds."""
    from tune.cli import build_parser
    from tune.commands._arguments import options_from

    args = build_parser().parse_args(["sweep", "quickstart", "--metric", "recall_at_1:max", "--metric",
                                      "memory_bytes:min", "--no-stop-collapsed", "--time-budget", "2h",
                                      "--gpu-hours-budget", "10", "--search", "nsga2"])
    options = options_from(args)
    assert options.metrics == ("recall_at_1", "memory_bytes") and options.modes == ("max", "min")
    assert options.stop_collapsed is False and options.time_budget_s == 7200.0 and options.gpu_hours_budget == 10.0
    defaults = options_from(build_parser().parse_args(["sweep", "quickstart"]))
    assert defaults.stop_collapsed is True and defaults.time_budget_s is None and defaults.metrics == ("recall_at_1",)


def test_a_bad_time_budget_exits_2_with_the_rule(capsys):
    from tune.cli import main

    """Bug caught: a typo'd budget (2d) crashing with a traceback, or accepted as some other number."""
    assert main(["sweep", "quickstart", "--time-budget", "2d"]) == 2
    assert "--time-budget must be a number of seconds or a duration" in capsys.readouterr().err


def test_a_sweep_ended_by_its_budget_says_so_on_the_last_line(monkeypatch, capsys):
    """Bugs caught: a sweep cut short by --time-budget ending on the usual summary, so the user cannot
    tell a finished study from a truncated one; W&B's sync command (offline runs) not printed after the
    sweep, or printed after the budget line."""
    from types import SimpleNamespace

    from tune.cli import main
    from tune.driver import plan as plan_module, sweep as sweep_module
    from tune.driver.options import SweepOptions
    from tune.search.guards import Guards

    guards = Guards({})
    guards.spent = "budget: the time budget (2h) was spent"
    fake = SimpleNamespace(warnings=[], warm=None, experiment="e", space=SimpleNamespace(name="s"),
                           options=SweepOptions(search="random", num_samples=1), max_epochs=1, results_uri="/x/e/results",
                           experiment_uri="/x/e", scheduler=SimpleNamespace(guards=guards),
                           loggers=[SimpleNamespace(closing=lambda: "W&B runs are offline; upload: wandb sync x"),
                                    SimpleNamespace(closing=lambda: None)])
    outcome = SimpleNamespace(counts=lambda: {"stopped_early": 1}, best=lambda: None, results_uri="/x/e/results",
                              experiment_uri="/x/e", exit_code=lambda: 0, metric="recall_at_1", swept=())
    monkeypatch.setattr(plan_module, "prepare", lambda space, options: fake)
    monkeypatch.setattr(sweep_module, "run_sweep", lambda plan: outcome)
    monkeypatch.setattr("tune.commands.sweep.print_watch_help", lambda plan: None)
    assert main(["sweep", "quickstart", "--time-budget", "2h"]) == 0
    *_, sync, last = capsys.readouterr().out.strip().splitlines()
    assert last.startswith("budget: the time budget (2h) was spent: the sweep stopped its trials")
    assert sync == "W&B runs are offline; upload: wandb sync x"


@pytest.mark.parametrize("argv, named", [
    (["sweep", "SPACE", "--workers-per-trial", "0"], "--workers-per-trial must satisfy >= 1"),
    (["sweep", "SPACE", "--workers-per-trial", "2", "--gpus-per-trial", "0.5"],
     "--gpus-per-trial must satisfy 0 or 1 with --workers-per-trial > 1"),
    # 128 rows over 3 ranks: not whole; over 64 ranks: 2 rows each, half a class of 4
    (["sweep", "SPACE", "--workers-per-trial", "3"],
     "--workers-per-trial 3 needs batch_size (the global batch) to be a multiple of 3 x samples_per_class=4"),
    (["sweep", "SPACE", "--gpus-per-trial", "64"], "--workers-per-trial 64 needs batch_size"),
    (["sweep", "SPACE", "--workers-per-trial", "2", "--set", "workers=4"],
     "--workers-per-trial must give the trials' workers"),
    (["train", "--set", "dataset=toy", "--set", "batch_size=16", "--workers", "8", "--output", "OUT"],
     "--workers 8 needs batch_size (the global batch) to be a multiple of 8 x samples_per_class=4"),
    (["train", "--set", "dataset=toy", "--workers", "0", "--output", "OUT"], "--workers must be >= 1"),
])
def test_bad_worker_input_exits_2_naming_the_flag_before_ray_starts(tmp_path, capsys, argv, named, ray_down):
    """Bug caught (issue 20): a data-parallel sweep or run with zero workers, fractional GPUs per worker, a
    global batch that does not split into whole classes per rank, or a space's own ``workers`` against the
    flag's, reaching Ray (a worker then fails, or waits, after the sweep started and wrote its folder)."""
    (tmp_path / "space.yaml").write_text(TOY)
    argv = [str(tmp_path / "space.yaml") if a == "SPACE" else str(tmp_path / "out") if a == "OUT" else a
            for a in argv]
    extra = ["--storage", str(tmp_path / "out"), "--no-dashboard"] if argv[0] == "sweep" else []
    assert main([*argv, *extra]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert not ray.is_initialized()  # nothing started


@pytest.mark.slow
def test_more_gpus_per_trial_than_any_node_exits_2_naming_the_nodes(tmp_path, capsys, ray_down):
    """Bug caught (issue 20): a sweep asking 2 GPUs per trial on a machine without GPUs accepted: its trials
    wait for GPUs forever. Checked once Ray is connected (it knows the nodes), before sweep.json is written."""
    (tmp_path / "space.yaml").write_text(TOY)
    code = main(["sweep", str(tmp_path / "space.yaml"), "--gpus-per-trial", "2", "--storage", str(tmp_path / "out"),
                 "--no-dashboard", "--name", "gpus"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--gpus-per-trial 2 asks 2 GPUs per trial, more than any node has (GPUs per node: " in err and ": 0)" in err
    assert not (tmp_path / "out" / "gpus" / "results" / "sweep.json").exists()
    assert not ray.is_initialized()  # the session it started is closed


# ---- Ctrl-C: Ray's Tuner.fit catches the first SIGINT and returns as if done ------------------------
class _Grid(list):
    """A ResultGrid's counts (``tune.driver.sweep.unfinished`` reads them) over trial statuses."""

    @property
    def num_terminated(self):
        return self.count("TERMINATED")

    @property
    def num_errors(self):
        return self.count("ERROR")


class _Tuner:
    def __init__(self, statuses, logs=()):
        self.statuses, self.logs = statuses, logs

    def fit(self):
        import logging

        for text in self.logs:  # as Ray's tune.py logs them: its signal handler, then the end of run()
            logging.getLogger("ray.tune.tune").warning(text)
        return _Grid(self.statuses)


STOP = ("Stop signal received (e.g. via SIGINT/Ctrl+C), ending Ray Tune run. This will try to checkpoint the "
        "experiment state one last time. Press CTRL+C (or send SIGINT/SIGKILL/SIGTERM) to skip. ")
RESUME = ('Experiment has been interrupted, but the most recent state was saved.\n'
          'Resume experiment with: Tuner.restore(path="%s", trainable=...)')


@pytest.mark.parametrize("statuses, logs, interrupted", [
    (["TERMINATED", "ERROR"], (), False),
    (["TERMINATED", "RUNNING", "PENDING"], (), True),  # no log record (Ray's logger silenced): the trials tell
    (["TERMINATED", "TERMINATED"], (STOP, RESUME % "/s/e"), True),  # every trial created so far had ended
])
def test_fit_tells_a_fit_that_ray_stopped_on_ctrl_c(statuses, logs, interrupted):
    """Bug caught: Ctrl-C on a sweep read as a finished sweep. Ray's Tuner.fit handles the first SIGINT itself
    (it stops the trials, saves the experiment state and returns normally), so no KeyboardInterrupt reached the
    CLI; an interrupted fit is told by Ray's "Stop signal received" record or by trials left unfinished."""
    import logging

    from tune.driver.sweep import fit

    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    keep = Keep()
    logging.getLogger("ray.tune.tune").addHandler(keep)
    try:
        assert fit(_Tuner(statuses, logs), "xbm-tune resume /s/e") is interrupted
    finally:
        logging.getLogger("ray.tune.tune").removeHandler(keep)
    if logs:  # Ray's advice names this project's command, not Tuner.restore (which needs the trainable)
        assert seen == [STOP, "Experiment has been interrupted, but the most recent state was saved.\n"
                              "Resume with: xbm-tune resume /s/e"]
    assert fit(_Tuner(["TERMINATED"], ())) is False  # the filter went with the fit that set it


@pytest.mark.parametrize("command", ["sweep", "resume"])
def test_an_interrupted_sweep_exits_1_and_ends_on_the_resume_line(tmp_path, capsys, monkeypatch, command):
    """Bugs caught: Ctrl-C on a sweep (or a resume) with a completed trial exiting 0, the code docs/sweeps.md
    gives for "done", and never printing how to continue (``xbm-tune resume PATH``); one without a completed
    trial saying "every trial failed". Also: the summary's best trial (its best epoch) read as Ray's
    "Current best trial" (the last epoch's value), two different answers without saying why."""
    import pandas as pd

    from tune.driver import sweep
    from tune.results.record import SweepOutcome

    trials = pd.DataFrame({"trial_id": ["t0", "t1", "t2"], "status": ["completed", "running", "running"],
                           "trial_name": "x", "best_recall_at_1": [0.4, 0.6, float("nan")], "best_epoch": [5, 3, 1]})
    uri = str(tmp_path / "out" / "e")

    def interrupted(*args, **kwargs):
        return SweepOutcome(uri, f"{uri}/results", trials, "recall_at_1", "max", interrupted=True)

    monkeypatch.setattr(sweep, "run_sweep", interrupted)
    monkeypatch.setattr(sweep, "resume_sweep", interrupted)
    (tmp_path / "space.yaml").write_text(TOY)
    argv = ([str(tmp_path / "space.yaml"), "--storage", str(tmp_path / "out"), "--name", "e"] if command == "sweep"
            else [uri])
    assert main([command, *argv, "--no-dashboard"]) == 1
    captured = capsys.readouterr()
    assert "trials: 1 completed, 2 running" in captured.out
    assert "best trial (by its best epoch): t1 (x): recall_at_1=0.6 at epoch 3, status running" in captured.out
    assert captured.err.strip().splitlines()[-1] == f"interrupted: continue with `xbm-tune resume {uri}`"
    assert "every trial failed" not in captured.err


def test_an_interrupted_confirm_exits_1_saying_so(tmp_path, capsys, monkeypatch):
    """Bug caught: Ctrl-C on ``confirm`` (Ray's Tuner.fit returns normally) exiting 0, as if every
    configuration had been confirmed, once one of its runs had completed."""
    import pandas as pd

    from tune.driver import sweep
    from tune.results.record import SweepOutcome

    from tests.tune.stages.sweep_rows import ROWS, write_sweep

    path = write_sweep(tmp_path, ROWS)
    trials = pd.DataFrame({"trial_id": ["c0", "c1"], "status": ["completed", "running"], "stage": "confirm"})
    monkeypatch.setattr(sweep, "run_configs", lambda *a, **k: SweepOutcome(
        path, f"{path}/results", trials, "recall_at_1", "max", interrupted=True))
    assert main(["confirm", path, "--top", "1", "--seeds", "2", "--no-dashboard"]) == 1
    assert "interrupted: the confirm runs stopped before they finished" in capsys.readouterr().err


SIGINT_SPACE = (TOY.replace("epochs: 2", "epochs: 8").replace("batch_size: 128", "batch_size: 16, samples_per_class: 4")
                .replace("{choice: [none, xbn]}", "{grid: [none, xbn]}"))


@pytest.mark.slow
def test_ctrl_c_on_a_sweep_exits_1_with_the_resume_line(tmp_path):
    """Bug caught: Ctrl-C (SIGINT) on ``xbm-tune sweep`` once a trial had completed exiting 0 ("done"), with
    Ray's ``Tuner.restore(...)`` advice and without the CLI's ``xbm-tune resume PATH`` line: Ray's Tuner.fit
    catches the first SIGINT and returns normally. A real driver, interrupted in its second trial's epochs
    (``resume`` after a killed driver: tests/tune/test_faults.py)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from .conftest import REPO

    (tmp_path / "space.yaml").write_text(SIGINT_SPACE)
    argv = [sys.executable, "-m", "tune.cli", "sweep", str(tmp_path / "space.yaml"), "--search", "grid",
            "--scheduler", "fifo", "--max-concurrent", "1", "--storage", str(tmp_path / "out"), "--name", "cc",
            "--no-dashboard", "--checkpoint-period", "0", "--no-stop-collapsed"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    driver = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, firsts, deadline = [], 0, time.time() + 180
    try:
        for line in driver.stdout:  # the second trial's first epoch (one trial at a time): 1 completed, 7 to go
            lines.append(line)
            firsts += " epoch 1/8 " in line
            if firsts == 2:
                driver.send_signal(signal.SIGINT)
                break
            assert time.time() < deadline, "".join(lines[-50:])
        rest, _ = driver.communicate(timeout=120)
    finally:
        driver.kill()
    output = "".join(lines) + rest
    assert driver.returncode == 1, output[-3000:]
    summary = output[output.index("\ntrials: "):].splitlines()  # the CLI's, after Ray's session closed
    assert f"interrupted: continue with `xbm-tune resume {tmp_path / 'out' / 'cc'}`" in summary, output[-3000:]
    assert "trials: 1 completed, 1 running" in summary and "Tuner.restore" not in output


def test_a_second_ctrl_c_names_resume_only_for_what_resume_continues(monkeypatch, capsys):
    """Bug caught: a KeyboardInterrupt in `train`, `confirm` or a sweep still checking its input told the
    user to `xbm-tune resume PATH` (a literal PATH, and nothing resume can continue)."""
    from tune import cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("tune.commands.spaces.run", interrupted)  # the parser is built inside main: it takes this one
    assert cli.main(["spaces"]) == 1
    assert capsys.readouterr().err.strip() == "interrupted"


def test_version_prints_the_installed_metadata_s_version(capsys):
    """Bug caught: no ``xbm-tune --version`` (a usage error, exit 2), or one that prints a version typed into
    the CLI instead of the package metadata's (``importlib.metadata``), so the two drift apart at a release."""
    import importlib.metadata

    try:
        installed = importlib.metadata.version("xbm-tune")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("xbm-tune is not installed here (a source tree on PYTHONPATH)")
    try:   # main turns argparse's SystemExit into its return value; catch it should that change
        status = main(["--version"])
    except SystemExit as exc:
        status = exc.code
    assert status == 0
    assert capsys.readouterr().out == f"xbm-tune {installed}\n"


def command_parsers() -> dict:
    """Every command of tune/cli.py's registry (``COMMANDS``) -> its sub-parser, as ``--help`` shows it."""
    import argparse

    from tune.cli import COMMANDS, build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    return dict(sub.choices)


def test_every_command_has_a_description_and_positional_help_in_plain_text():
    """Bugs caught: commands whose --help has no description (sweep, train, export, export-optuna, spaces,
    dashboard, ...); a positional with no help text (report's and status's PATH); confirm's and refit's
    descriptions showing their docstrings' raw ````x```` literals."""
    from tune.cli import COMMANDS

    for name, parser in command_parsers().items():
        assert (parser.description or "").strip(), f"xbm-tune {name} has no description"
        texts = [parser.description, parser.epilog or "", COMMANDS[name]]
        for action in parser._actions:
            if not action.option_strings:
                assert (action.help or "").strip(), f"xbm-tune {name}: positional {action.dest} has no help"
            texts.append(action.help or "")
        assert not [t for t in texts if "``" in t], f"xbm-tune {name}: a double backtick in its help"


def test_address_says_which_address_each_command_takes():
    """Bug caught: --address named "a cluster" in sweep and a "dashboard URL" in submit without either saying
    it is not the other, so a dashboard URL given to sweep (or ray://... to submit) fails late."""
    parsers = command_parsers()

    def address_help(name: str) -> str:
        return next(a.help for a in parsers[name]._actions if "--address" in a.option_strings)

    for name in ("sweep", "resume", "confirm", "refit"):
        assert "Ray cluster to join" in address_help(name) and "not its dashboard URL" in address_help(name)
    assert "dashboard URL" in address_help("submit") and "not a cluster address" in address_help("submit")


# ---- log messages: --quiet, -v (issue 55) ---------------------------------------------------------------------
def _library_messages(tmp_path):
    """A command whose run calls library code that logs: the budget guard (INFO, was a print), the Parquet sink's
    collapse warning (WARNING, was a print) and its trials.parquet rewrite (DEBUG)."""
    from types import SimpleNamespace

    from tests.tune.results.test_sink import FakeTrial, make_sink, result
    from tune.search.guards import Budget, Guards

    def run(args):
        guards = Guards({}, budget=Budget(time_s=1.0))
        times = iter([0.0, 5.0])
        guards.clock = lambda: next(times)
        controller = SimpleNamespace(get_trials=lambda: [], search_alg=SimpleNamespace(set_finished=lambda: None))
        guards.check_budget(controller)   # starts the clock
        guards.check_budget(controller)   # 5 s > 1 s: spent
        sink = make_sink(tmp_path / f"sink{len(list(tmp_path.iterdir()))}")
        trial = FakeTrial("t1", {"dataset": "toy", "model": "mlp", "epochs": 4})
        sink.on_trial_start(0, [], trial)
        sink.on_trial_result(0, [], trial, result(1, 0.1, loss_pos_pairs=0.0))
        print("the command's result")
        return 0

    return run


@pytest.mark.parametrize("flags, shown", [
    ([], ("info", "warning")), (["--quiet"], ("warning",)), (["-q"], ("warning",)),
    (["-v"], ("info", "warning", "debug")), (["--verbose"], ("info", "warning", "debug"))])
def test_quiet_and_verbose_choose_the_library_messages_and_leave_the_results(tmp_path, capsys, monkeypatch,
                                                                             flags, shown):
    """Bugs caught (issue 55): the sink's collapse warning and the budget message printed to stdout by the library,
    so that nothing (--quiet, a notebook's logging settings) could silence or route them; --quiet hiding the
    warnings or the command's own result; -v not reaching DEBUG. A warning stays under --quiet: --quiet is
    WARNING and up."""
    import tune.commands.spaces as spaces

    monkeypatch.setattr(spaces, "run", _library_messages(tmp_path))
    assert main([*flags, "spaces"]) == 0
    out, err = capsys.readouterr()
    assert out == "the command's result\n"
    lines = err.splitlines()
    budget = [line for line in lines if line.startswith("budget: the time budget (1s) was spent: no new trial starts")]
    collapse = [line for line in lines if line.startswith("warning: trial t1: epoch 1 collapsed")]
    debug = [line for line in lines if line.startswith("debug: trials.parquet rewritten")]
    assert (len(budget), len(collapse), bool(debug)) == ("info" in shown, 1, "debug" in shown)
    assert len(lines) == len(budget) + len(collapse) + len(debug)


def test_the_log_flags_go_before_the_command_and_exclude_each_other(capsys):
    """Bug caught: -v taken by a command's own flag (or --quiet after the command silently ignored), and --quiet
    with -v accepted with one of them winning unsaid."""
    assert main(["-q", "-v", "spaces"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    assert main(["spaces", "--quiet"]) == 2
    assert "unrecognized arguments: --quiet" in capsys.readouterr().err
