"""The Omniglot one-shot study, one command (``scripts/study_omniglot_oneshot.sh OUT_DIR``; issue 52):

1. ``sweep``: ``xbm-tune sweep omniglot_oneshot --metric val_oneshot_error --mode min --time-budget BUDGET`` into
   ``OUT_DIR/sweep`` (a killed sweep continues with ``xbm-tune resume``);
2. the choice: the sweep trial ``refit --best`` takes (completed before stopped early, then the lowest
   ``best_val_oneshot_error``), written to ``OUT_DIR/chosen.yaml`` as ``xbm-tune train --config`` reads it (every
   class, the refit's epochs) and never chosen on the real runs;
3. the memory comparison at the chosen configuration: for ``normaliser.kind`` none, xbm, xbn, pcxbn (``none``:
   the memory off), each seed ``s0+1 .. s0+N``; the chosen variant's refits over every seed first, then a seed at a
   time, every variant's refit and then its validation run (a stopped study holds whole seeds)
   - ``refit --trial CHOSEN --classes all --seeds 1 --seed-start s``, exported and scored once on the 20 real
     runs (``xbm-tune oneshot``): ``OUT_DIR/oneshot/<variant>-s<seed>.parquet``;
   - ``confirm --top 1 --seeds 1 --seed-start s`` (the alphabets held out as the sweep held them): the variant's
     ``val_oneshot_error``, to rank the variants as validation would;
4. references on the real runs, once: cosine on the chosen export's input pixels, and its model untrained;
5. ``OUT_DIR/summary.md`` and its CSV tables and figures (:mod:`analysis.oneshot_study`).

The commands that run trials (sweep, resume, refit, confirm) join one local Ray that this script starts at the
first of them and that ends with it (Ray's processes share its fate, a kill included), without a dashboard: a
Ray start per command was a third of a small study's time.

Every step leaves a file behind and is skipped when its file exists, so the command resumes where it stopped;
``OUT_DIR/study.json`` lists each invocation with its commit, and ``OUT_DIR/scorings.csv`` every scoring of the
real runs (the test set). Output of each command goes to ``OUT_DIR/logs/``.
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO.parent / "shared" / "datasets" / "omniglot_small"
RUNS = REPO.parent / "shared" / "datasets" / "omniglot_oneshot" / "all_runs.zip"
METRIC = "val_oneshot_error"
# the memory comparison: what each variant sets on top of the chosen configuration
VARIANTS = {"none": {"memory.enabled": False},
            "xbm": {"memory.enabled": True, "normaliser.kind": "none"},
            "xbn": {"memory.enabled": True, "normaliser.kind": "xbn"},
            "pcxbn": {"memory.enabled": True, "normaliser.kind": "pcxbn"}}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/study_omniglot_oneshot.sh", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    parser.add_argument("out", metavar="OUT_DIR", help="the study's folder (created; rerun to resume)")
    parser.add_argument("--budget", type=float, default=60.0, metavar="MINUTES", help="the sweep's time budget")
    parser.add_argument("--seeds", type=int, default=3, help="seeds per variant (refit and validation runs)")
    parser.add_argument("--data", default=str(DATA), help="omniglot_small's folder (default %(default)s)")
    parser.add_argument("--runs", default=str(RUNS), help="all_runs.zip, or its folder (default %(default)s)")
    parser.add_argument("--space", default="omniglot_oneshot", help="the sweep's space (default %(default)s)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help="the memory comparison's variants, among %(default)s")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="a config value for every run of the study (e.g. epochs=2 for a trial run)")
    parser.add_argument("--sweep-arg", action="append", default=[], metavar="ARG",
                        help="an extra argument for `xbm-tune sweep` (repeat: --sweep-arg=--num-samples --sweep-arg=4)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.variants.split(",")) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants must name variants among {list(VARIANTS)}, but got {unknown}")
    if args.seeds < 1:
        parser.error(f"--seeds must be >= 1, but got {args.seeds}")
    # the commands run in the repository: paths the user gave are made absolute here, where they meant them
    args.data, args.runs = (str(Path(p).resolve()) for p in (args.data, args.runs))
    space = Path(args.space)
    args.space = str(space.resolve()) if space.suffix in (".yaml", ".yml") else args.space
    return args


class Study:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Path(args.out).resolve()
        self.sweep = self.out / "sweep"
        self.xbm_tune = [sys.executable, "-m", "tune.cli"]
        for sub in ("logs", "exports", "oneshot"):
            (self.out / sub).mkdir(parents=True, exist_ok=True)
        self.sets = [f"--set={s}" for s in args.overrides]
        self.cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        # a refit or validation run is alone on the machine: all its CPUs (the sweep's trials shared them)
        self.alone = ["--cpus-per-trial", str(self.cpus)]
        self.address: str | None = None

    def ray(self) -> list[str]:
        """The flags that make a command join the study's Ray, started at the first call (module docstring)."""
        if self.address is None:
            import ray

            ray.init(address="local", num_cpus=self.cpus, include_dashboard=False, log_to_driver=False)
            self.address = ray.get_runtime_context().gcs_address
        return ["--address", self.address, "--no-dashboard"]

    # ---- running commands -------------------------------------------------------------------------------
    def run(self, log: str, *argv: str, check: bool = True) -> int:
        command = [*self.xbm_tune, *argv]
        print(f"[study] {time.strftime('%H:%M:%S')} {shlex.join(['xbm-tune', *argv])}  (log: logs/{log}.log)",
              flush=True)
        with open(self.out / "logs" / f"{log}.log", "a") as handle:
            handle.write(f"\n$ {shlex.join(command)}\n")
            handle.flush()
            code = subprocess.call(command, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO)
        if check and code != 0:
            raise SystemExit(f"study: `xbm-tune {argv[0]}` exited {code}; see {self.out / 'logs' / (log + '.log')}")
        return code

    def record_invocation(self) -> None:
        path = self.out / "study.json"
        record = json.loads(path.read_text()) if path.exists() else {"invocations": []}
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                                    capture_output=True, text=True).stdout.strip())
        record["invocations"].append({"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                      "commit": commit + ("+dirty" if dirty else ""),
                                      "command": shlex.join(["scripts/study_omniglot_oneshot.sh", *sys.argv[1:]])})
        path.write_text(json.dumps(record, indent=1) + "\n")

    # ---- 1. the sweep ------------------------------------------------------------------------------------
    def run_sweep(self) -> None:
        done = self.out / "sweep.done"
        if done.exists():
            return
        if (self.sweep / "results" / "sweep.json").exists():
            self.run("sweep", "resume", str(self.sweep), *self.ray())
        else:
            self.run("sweep", "sweep", self.args.space, "--storage", str(self.out), "--name", "sweep",
                     "--metric", METRIC, "--mode", "min", "--time-budget", f"{self.args.budget * 60:.0f}s",
                     "--num-samples", "200", "--grace-period", "2", "--reduction-factor", "3",
                     f"--set=data_root={self.args.data}", *self.sets, *self.ray(), *self.args.sweep_arg)
        done.write_text(time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()))

    # ---- 2. the choice -----------------------------------------------------------------------------------
    def choose(self) -> dict:
        path = self.out / "chosen.json"
        if path.exists():
            return json.loads(path.read_text())
        from tune.results.record import read_record
        from tune.search.warm_start import read_trials
        from tune.stages.refit import pick, refit_configs

        record = read_record(str(self.sweep))
        trial = pick(read_trials(str(self.sweep)), record, None)
        config = refit_configs(trial, [0], "all", {"data_root": self.args.data})[0]
        config.pop("seed")
        chosen = {"trial_id": trial["trial_id"], f"best_{METRIC}": trial.get(f"best_{METRIC}"),
                  "variant": variant_of(config), "config": config}
        path.write_text(json.dumps(chosen, indent=1, default=str) + "\n")
        write_chosen_yaml(self.out / "chosen.yaml", config, trial["trial_id"], chosen[f"best_{METRIC}"])
        return chosen

    # ---- 3. the memory comparison ------------------------------------------------------------------------
    def seeds(self) -> list[int]:
        from tune.results.record import read_record

        start = int(read_record(str(self.sweep)).options.get("seed") or 0) + 1
        return list(range(start, start + self.args.seeds))

    def new_trial(self, stage: str, before: set[str]) -> str:
        from tune.search.warm_start import read_trials

        rows = [r for r in read_trials(str(self.sweep)) if r.get("stage") == stage
                and str(r.get("trial_id")) not in before and r.get("status") == "completed"]
        if not rows:
            raise SystemExit(f"study: the {stage} run finished but no new completed {stage} trial is in "
                             f"{self.sweep}/results; see the logs")
        return str(rows[-1]["trial_id"])

    def trial_ids(self, stage: str) -> set[str]:
        from tune.search.warm_start import read_trials

        if not (self.sweep / "results" / "trials.parquet").exists():
            return set()
        return {str(r.get("trial_id")) for r in read_trials(str(self.sweep)) if r.get("stage") == stage}

    def refit(self, chosen: dict, variant: str, seed: int) -> None:
        name = f"{variant}-s{seed}"
        scored = self.out / "oneshot" / f"{name}.parquet"
        if scored.exists():
            return
        marker = self.out / "exports" / f"{name}.trial"
        if not marker.exists():
            before = self.trial_ids("refit")
            self.run(f"refit-{name}", "refit", str(self.sweep), "--trial", chosen["trial_id"], "--classes", "all",
                     "--seeds", "1", "--seed-start", str(seed), *variant_sets(chosen, variant), *self.alone,
                     *self.ray(), *self.sets)
            marker.write_text(self.new_trial("refit", before) + "\n")
        trial = marker.read_text().strip()
        export = self.out / "exports" / name
        if not (export / "embedder.yaml").exists():
            self.run(f"refit-{name}", "export", str(self.sweep), "--trial", trial, "--stage", "refit",
                     "--out", str(export))
        self.score(f"refit-{name}", export, scored, what=f"{variant} seed {seed} (refit {trial})")

    def validate(self, chosen: dict, variant: str, seed: int) -> None:
        name = f"{variant}-s{seed}"
        marker = self.out / "exports" / f"{name}.confirm"
        if marker.exists():
            return
        before = self.trial_ids("confirm")
        self.run(f"confirm-{name}", "confirm", str(self.sweep), "--top", "1", "--seeds", "1", "--seed-start",
                 str(seed), *variant_sets(chosen, variant), *self.alone, *self.ray(), *self.sets)
        marker.write_text(self.new_trial("confirm", before) + "\n")

    def score(self, log: str, export: Path, out: Path, what: str) -> None:
        """One scoring of the real runs (the test set), counted in scorings.csv."""
        self.run(log, "oneshot", str(export), "--runs", self.args.runs, "--out", str(out), "--device", "cpu")
        self.count_scoring(what, out.name)

    def count_scoring(self, what: str, file: str) -> None:
        """A line of scorings.csv: every time the real runs were scored, and by what."""
        with open(self.out / "scorings.csv", "a") as handle:
            if handle.tell() == 0:
                handle.write("time,what,parquet\n")
            handle.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())},{what},{file}\n")

    # ---- 4. references -----------------------------------------------------------------------------------
    def references(self, chosen: dict) -> None:
        path = self.out / "oneshot" / "references.csv"
        if path.exists():
            return
        export = self.out / "exports" / f"{chosen['variant']}-s{self.seeds()[0]}"
        rows = real_run_references(export, self.args.runs, seed=self.seeds()[0])
        path.write_text("reference,run,error\n" + "".join(f"{k},{run},{e!r}\n" for k, run, e in rows))
        for kind in ("raw pixels", "untrained model"):
            self.count_scoring(kind, path.name)

    def main(self) -> None:
        self.record_invocation()
        self.run_sweep()
        chosen = self.choose()
        print(f"[study] chosen: trial {chosen['trial_id']} ({chosen['variant']}), best {METRIC} "
              f"{chosen[f'best_{METRIC}']}", flush=True)
        variants = [v for v in self.args.variants.split(",")]
        variants.sort(key=lambda v: v != chosen["variant"])   # the chosen configuration first
        if chosen["variant"] in variants:   # its refits over every seed first: the study's answer
            for seed in self.seeds():
                self.refit(chosen, chosen["variant"], seed)
            self.references(chosen)
        # then a seed at a time, every variant's refit and validation run: a study stopped part-way holds whole
        # seeds (paired differences and the rank correlation need every variant), not some variants' seeds
        for seed in self.seeds():
            for variant in variants:
                self.refit(chosen, variant, seed)
            for variant in variants:
                self.validate(chosen, variant, seed)
        from analysis.oneshot_study import write_summary

        summary = write_summary(self.out)
        print(f"[study] wrote {summary}", flush=True)


def variant_sets(chosen: dict, variant: str) -> list[str]:
    """The --set arguments that turn the chosen configuration into ``variant`` (nothing for its own)."""
    if variant == chosen["variant"]:
        return []
    config = chosen["config"]
    values = dict(VARIANTS[variant])
    if values["memory.enabled"] and not config.get("memory.enabled", True):
        values["memory.ratio"] = 1.0   # the chosen had no memory: as large as the training set (XBM Fig. 1)
    return [f"--set={k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values.items()]


def variant_of(config: dict) -> str:
    if not config.get("memory.enabled", True):
        return "none"
    kind = config.get("normaliser.kind", "none")
    return "xbm" if kind == "none" else kind


def write_chosen_yaml(path: Path, config: dict, trial_id: str, value) -> None:
    """The chosen configuration as ``xbm-tune train --config`` reads it: every class (train_on all, val_fraction
    0), the refit's epochs; ``--set seed=N`` trains refit seed N."""
    import yaml

    header = (f"# The Omniglot one-shot study's choice: sweep trial {trial_id} (best {METRIC} {value}), as its refit\n"
              "# runs it: every class (train_on all, val_fraction 0), the trial's epochs. Train one seed with\n"
              "#   xbm-tune train --config chosen.yaml --set seed=N --set data_root=PATH/TO/omniglot_small\n")
    body = {k: v for k, v in sorted(config.items()) if k != "data_root"}
    path.write_text(header + yaml.safe_dump(body, sort_keys=False, default_flow_style=False))


def real_run_references(export: Path, runs: str, seed: int) -> list[tuple[str, str, float]]:
    """Per run: the error of cosine on the export's input pixels (``raw``: decoded, inverted, resized and
    normalised as the model sees them) and of the export's model untrained (``untrained``: seeded as the refit)."""
    import torch

    from xbm.evaluate.embedder import ImageEmbedder, load_embedder, read_card
    from xbm.evaluate.oneshot import evaluate_runs, read_runs, runs_folder
    from xbm.models import create_embedding_model

    trained = load_embedder(export, device="cpu")
    prep = trained.preprocessing
    card = read_card(export)
    torch.manual_seed(seed)
    model = create_embedding_model(card["model"], tuple(card["input_shape"]), int(card["embedding_size"]))
    untrained = ImageEmbedder(model, prep, device="cpu")
    out = []
    with runs_folder(runs) as folder:
        runs_read = read_runs(folder)
        for kind, embed in (("raw", lambda paths: prep(paths).flatten(1)),
                            ("untrained", lambda paths: untrained.embed(paths, 64, "cpu"))):
            out += [(kind, r.run, r.error) for r in evaluate_runs(runs_read, embed)]
    return out


if __name__ == "__main__":
    Study(parse(sys.argv[1:])).main()
