"""The ``sciattn`` command line: ``train``, ``evaluate``, ``demo``, ``data``, ``export`` and ``backends``."""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path

__all__ = ["main"]


def _train_target(args) -> tuple[Path, bool]:
    """``(run directory, resume?)`` from ``--out`` and ``--resume [RUN_DIR]``."""
    resume_dir = args.resume if isinstance(args.resume, str) else None
    if resume_dir and args.out and Path(args.out).resolve() != Path(resume_dir).resolve():
        raise ValueError(f"--resume, --out: expected one run directory, got --resume {resume_dir!r} and --out {args.out!r}")
    if resume_dir or args.out:
        return Path(resume_dir or args.out), bool(args.resume)
    if args.config is None:
        raise ValueError("config: expected a TOML file, or --resume RUN_DIR to continue a run with its stored config")
    return Path("runs") / Path(args.config).stem, bool(args.resume)


def _cmd_train(args) -> int:
    from .config import from_dict, load_config
    from .training.run import train_run

    out, resume = _train_target(args)
    if resume and args.force:
        raise ValueError("--resume, --force: expected one of them (--resume continues the run, --force replaces it)")
    if args.config is not None:
        cfg = load_config(args.config, args.set, args.unset)
    else:
        from .config import ConfigError, apply_overrides
        from .training.checkpoint import load_checkpoint
        from .training.run import _run_dir_error

        message = _run_dir_error(out, resume=True, force=None)
        if message is not None:
            raise ConfigError(message)
        cfg = from_dict(apply_overrides(json.loads(load_checkpoint(out)["run_config"]), args.set, args.unset))
    # the run-directory checks (existing run, checkpoint to resume, writability, stale temporary files)
    # run in train_run on rank 0, before the data or the model are built; every rank raises their error
    metrics = train_run(cfg, out, resume=resume, force=bool(args.force), progress=not args.no_progress,
                        allow_other_data=bool(args.allow_other_data))
    if "test" in metrics and not _is_worker():
        print(json.dumps({"run_dir": str(out), "test": metrics["test"]}, indent=2))
    return 0


def _is_worker() -> bool:
    """A torchrun rank other than 0 (only rank 0 prints results)."""
    import os

    return int(os.environ.get("RANK", "0")) != 0


def _cmd_evaluate(args) -> int:
    from .training.checkpoint import atomic_write_bytes
    from .training.run import evaluate_run

    if args.resolutions:
        return _cmd_sweep(args)
    if not args.data:
        raise ValueError("--data: expected one or more data files to evaluate on (or --resolutions R... to sweep the "
                         "run's own data distribution), got none")
    results = [evaluate_run(args.run_dir, d, fmt=args.format, plot=None, chunk_points=args.chunk_points)
               for d in args.data]
    print("| data | resolution | relative L2 | relative H1 | ms/sample |")
    print("|---|---|---|---|---|")
    for r in results:
        print(f"| {Path(r['data']).name} | {'x'.join(map(str, r['resolution']))} | {r['rel_l2']:.4f} | "
              f"{'-' if r['rel_h1'] is None else format(r['rel_h1'], '.4f')} | {1e3 * r['seconds_per_sample']:.2f} |")
    if args.json:
        atomic_write_bytes((json.dumps(results, indent=2) + "\n").encode(), args.json)
    return 0


def _cmd_sweep(args) -> int:
    from .analysis.sweep import resolution_sweep, sweep_markdown
    from .config import parse_overrides

    if args.data and len(args.data) != 1:
        raise ValueError(f"--data: expected one benchmark name or path with --resolutions, got {len(args.data)}: "
                         f"{args.data}")
    params = {key: value for _, key, value in parse_overrides([f"param.{p}" for p in args.param])}
    report = resolution_sweep(args.run_dir, args.data[0] if args.data else None, args.resolutions, split=args.split,
                              root=args.root, n_samples=args.n_samples, seed=args.seed, params=params,
                              batch_size=args.batch_size, device=args.device, threshold=args.threshold,
                              max_growth=args.max_growth, allow_distribution_shift=args.allow_distribution_shift,
                              tolerance=args.tolerance, progress=not args.no_progress, chunk_points=args.chunk_points)
    print(sweep_markdown(report))
    print("wrote " + ", ".join(report["files"].values()))
    if args.json:
        from .training.checkpoint import atomic_write_bytes

        atomic_write_bytes((json.dumps(report, indent=2) + "\n").encode(), args.json)
    return 0


def _cmd_demo(args) -> int:
    from .demo import run_demo

    run_demo(args.out, args.set, progress=not args.no_progress)
    return 0


def _cmd_data(args) -> int:
    from sciattn import pde_data

    if args.data_command == "list":
        from sciattn.pde_data.catalogue import formats
        from sciattn.pde_data.fetch import SMALL, describe_sources

        print("| name | source | files | split | sample shapes | resolutions |")
        print("|---|---|---|---|---|---|")
        for b in pde_data.list_benchmarks():
            print(f"| {b.name} | {b.source} | {b.files} | {b.split} | {b.shapes} | {b.resolutions} |")
        print("\nFile formats (`load(PATH)` and `[data] train = PATH` detect them, in this order):\n")
        print("| format | source | files | split | sample shapes |")
        print("|---|---|---|---|---|")
        for f in formats():
            print(f"| {f.name} | {f.source} | {f.files} | {f.split} | {f.shapes} |")
        print("\nDownload sources (`sciattn data fetch NAME --root DIR`; without NAME the small files "
              f"{', '.join(SMALL)}):\n")
        print("| name | kind | checksum | files |")
        print("|---|---|---|---|")
        for src in describe_sources():
            print(f"| {src['name']} | {src['kind']} | {src['checksum']} | {', '.join(src['files'])} |")
        return 0
    if args.data_command == "generate":
        from sciattn.pde_data.generate import generate_at_resolutions

        from .config import parse_overrides

        params = {key: value for _, key, value in parse_overrides([f"param.{p}" for p in args.param])}
        resolutions = [*(args.resolution or []), *(args.resolutions or [])]
        if not resolutions:
            raise ValueError("--resolution: expected one or more points per axis (--resolution R [R ...]), got none")
        seed = 0 if args.seed is None else args.seed
        if args.like:
            from .analysis.sweep_data import generator_like

            name, like_params, like_seed = generator_like(args.like)
            if args.name != name:
                raise ValueError(f"name: --like {args.like!r} matches the generator {name!r}, got {args.name!r}")
            params = {**like_params, **params}
            seed = like_seed if args.seed is None else args.seed
        for path in generate_at_resolutions(args.name, args.n, resolutions, args.out, seed=seed,
                                            progress=not args.no_progress, **params):
            print(f"wrote {path}")
        return 0
    from sciattn.pde_data.fetch import fetch, fetch_small

    root = Path(args.root).expanduser() if args.root else pde_data.default_root()
    paths = fetch(args.name, root) if args.name else fetch_small(root)
    for path in paths:
        print(f"ok {path}")
    return 0


def _cmd_export(args) -> int:
    from .deployment.export import export_run, onnx_missing

    if args.format == "onnx" and onnx_missing():
        missing = onnx_missing()
        print(f"sciattn export: --format onnx needs {' and '.join(missing)}: pip install \"sciattn[onnx]\" "
              f"(or pip install {' '.join(missing)})", file=sys.stderr)
        return 2
    try:
        shape = [int(v) for v in args.shape.split("x")] if args.shape else None
    except ValueError:
        raise ValueError(f"--shape: expected sizes joined by 'x', e.g. 64x64 or 1024, got {args.shape!r}") from None
    info = export_run(args.run_dir, args.out, format=args.format, example_shape=shape, input_dtype=args.dtype,
                      max_points=args.max_points, dynamic_spatial=not args.static)
    print(json.dumps(info, indent=2, default=str))
    return 0


def _cmd_backends(args) -> int:
    import sciattn

    print(json.dumps(sciattn.capability_report()))
    sciattn.available_backends()
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sciattn", description="Attention-based neural operators for PDE surrogates.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an operator from a TOML config (data parallel under torchrun)",
                       description="Train an operator. Data parallel: torchrun --nproc-per-node N -m sciattn.train.cli "
                                   "train CONFIG (train.batch_size is the global batch).")
    t.add_argument("config", nargs="?", help="TOML file with [model], [data] and [train] sections (optional with "
                                             "--resume RUN_DIR: the run's stored config)")
    t.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a config value (TOML literal); repeatable")
    t.add_argument("--unset", action="append", default=[], metavar="SECTION.KEY",
                   help="remove a key the config sets, so that it takes its default (TOML has no null); "
                        "repeatable, applied before --set")
    t.add_argument("--out", help="run directory (default runs/<config name>)")
    t.add_argument("--resume", nargs="?", const=True, default=False, metavar="RUN_DIR",
                   help="continue exactly from RUN_DIR/checkpoint.pt (default RUN_DIR: --out), mid-epoch included; "
                        "a finished run continues when --set train.epochs=N raises its epochs (cosine schedule "
                        "only); without a checkpoint it is an error")
    t.add_argument("--force", action="store_true",
                   help="replace the run already in --out: delete its checkpoint, metrics, logs, plots, "
                        "tensorboard/ and eval/ and train from scratch (without --force or --resume an existing "
                        "run is refused)")
    t.add_argument("--allow-other-data", action="store_true",
                   help="with --resume: continue on data whose fingerprint (shapes, sample count, a hash of the first "
                        "samples) differs from the one the run recorded (without it, that is refused)")
    t.add_argument("--no-progress", action="store_true", help="hide progress bars")
    t.set_defaults(func=_cmd_train)

    e = sub.add_parser("evaluate", help="evaluate a trained run on data files, or sweep resolutions",
                       description="Without --resolutions: each data file at its own resolution. With --resolutions: "
                                   "the resolution-invariance report of one data set (Markdown, JSON and plots in "
                                   "RUN_DIR/eval/), with the rollout error and a stability verdict for time series.")
    e.add_argument("run_dir")
    e.add_argument("--data", nargs="+",
                   help="data file(s); with --resolutions optional: default the run's own data distribution (its "
                        "recorded generator, the generator matched to a neuraloperator Darcy file, or restriction "
                        "of its file), else one benchmark name (darcy, darcy_neuralop, burgers, navier_stokes are "
                        "generated at each resolution) or path")
    e.add_argument("--resolutions", nargs="+", type=int, metavar="R", help="points per axis to evaluate at")
    e.add_argument("--format", default=None, help="data format (default: detected from the file content)")
    e.add_argument("--json", help="write the results to this JSON file")
    e.add_argument("--split", default=None, choices=["train", "test"],
                   help="split of a named or file benchmark (default: test; a plain file path: all of it)")
    e.add_argument("--root", help="folder of named benchmarks and of the generated-data cache (default $SCIATTN_DATA)")
    e.add_argument("--n-samples", type=int, default=16, help="generated samples per resolution (default 16)")
    e.add_argument("--seed", type=int, default=None, help="seed of generated samples (default: the run's data seed + 1)")
    e.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="solver parameter or loader keyword, e.g. --param t_final=5 --param t_in=10; repeatable")
    e.add_argument("--batch-size", type=int, default=8)
    e.add_argument("--chunk-points", type=int, default=None, metavar="N",
                   help="evaluate in chunks of N query points (operators whose points couple through sums: "
                        "Transolver, LinearNO, GNOT, ONO): the sums over all points are formed first, so the result "
                        "is the same, with the activations of N points at a time")
    e.add_argument("--device", default="cpu")
    e.add_argument("--threshold", type=float, default=1.0, help="rollout: error above which it is unstable (default 1)")
    e.add_argument("--max-growth", type=float, default=1.1,
                   help="rollout: per-frame error growth factor above which it is 'growing' (default 1.1)")
    e.add_argument("--allow-distribution-shift", action="store_true",
                   help="sweep data outside the training statistics anyway (the report then says out of "
                        "distribution); without it such a sweep is refused")
    e.add_argument("--tolerance", type=float, default=1.5,
                   help="invariant when every relative L2 is within this factor of the training-resolution one "
                        "(default 1.5)")
    e.add_argument("--no-progress", action="store_true")
    e.set_defaults(func=_cmd_evaluate)

    d = sub.add_parser("demo", help="Darcy flow: train at 32x32 on the CPU, evaluate zero-shot at 32, 64, 128")
    d.add_argument("--out", default="sciattn-demo", help="output directory (default ./sciattn-demo)")
    d.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE")
    d.add_argument("--no-progress", action="store_true")
    d.set_defaults(func=_cmd_demo)

    da = sub.add_parser("data", help="benchmark data: list, generate, fetch")
    dsub = da.add_subparsers(dest="data_command", required=True)
    dsub.add_parser("list", help="print every registered benchmark with its source, split and shapes")
    g = dsub.add_parser("generate", help="run a built-in solver and write NetCDF files that load() reads",
                        description="One solve, restricted to every resolution: the files hold the same samples.")
    g.add_argument("name", help="generator name, e.g. darcy, darcy_neuralop (matched to neuraloperator's Darcy files)")
    g.add_argument("--n", type=int, required=True, help="number of samples")
    g.add_argument("--resolution", type=int, nargs="+", metavar="R", help="points per axis; several allowed")
    g.add_argument("--resolutions", type=int, nargs="+", metavar="R", help="more points per axis")
    g.add_argument("--out", required=True, help="output directory")
    g.add_argument("--like", metavar="RUN_OR_FILE",
                   help="take the generator's parameters from a run's recorded data source or a data file (e.g. "
                        "darcy_neuralop for neuraloperator's darcy_train_16.pt); default seed: the recorded one + 1")
    g.add_argument("--seed", type=int, default=None, help="seed (default 0, or with --like the recorded seed + 1)")
    g.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="override a solver parameter, e.g. --param nu=1e-4 --param t_final=5; repeatable")
    g.add_argument("--no-progress", action="store_true")
    f = dsub.add_parser("fetch", help="download a dataset's public files with checksum verification",
                        description="Without NAME: the small files bundled with neuraloperator (Darcy 16/32, "
                                    "Burgers 16, mini car), sha256-checked, into $SCIATTN_DATA or "
                                    "~/.cache/sciattn/data, where load() finds them.")
    f.add_argument("name", nargs="?", help="a download group of `sciattn data list` (default: the small files)")
    f.add_argument("--root", help="folder to place the files in (default $SCIATTN_DATA or ~/.cache/sciattn/data)")
    da.set_defaults(func=_cmd_data)

    x = sub.add_parser("export", help="write a trained run as a program that runs without sciattn")
    x.add_argument("run_dir")
    x.add_argument("--format", default="torch-export", choices=["torch-export", "onnx"])
    x.add_argument("--out", required=True, help="output file (.pt2 for torch-export, .onnx for onnx)")
    x.add_argument("--shape", help="example resolution traced, e.g. 64x64, or N for point sets (default: the "
                                   "training resolution); dynamic sizes accept others")
    x.add_argument("--dtype", default=None, help="dtype of x the program takes, cast inside to the model's "
                                                 "(default: the training file's, e.g. bool, else float32)")
    x.add_argument("--max-points", type=int, default=None,
                   help="point sets padded in the graph (Erwin, BSA): the largest N accepted (default: training N)")
    x.add_argument("--static", action="store_true", help="fix the spatial sizes (only the batch stays dynamic)")
    x.set_defaults(func=_cmd_export)

    b = sub.add_parser("backends", help="print the attention backends and whether each runs here")
    b.set_defaults(func=_cmd_backends)
    return p


def _os_error_message(err: OSError) -> str:
    """``'PATH': cause``; ``disk full while writing 'PATH'`` for ``ENOSPC``; our own messages as they are."""
    if err.errno is None or err.strerror is None:
        return str(err)
    path = err.filename if err.filename is not None else None
    if err.errno == errno.ENOSPC:
        return f"disk full while writing {str(path)!r}" if path is not None else "disk full (no space left on device)"
    if path is None:
        return err.strerror
    where = repr(str(path)) + (f" -> {str(err.filename2)!r}" if err.filename2 is not None else "")
    return f"{where}: {err.strerror}"


def _import_error_message(err: ImportError) -> str:
    what = f"cannot import {err.name!r}" if err.name else "import failed"
    where = f" (from {err.path!r})" if err.path else ""
    return f"{what}{where}: {err.msg}; install the missing package or choose a config that does not need it"


def main(argv: list[str] | None = None) -> int:
    """Run one command; errors (bad input, files that cannot be read or written, missing packages)
    print one line ``sciattn COMMAND: error: ...`` on stderr and return 2, without a traceback."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, ConnectionError, FloatingPointError, OSError, ImportError) as err:
        if isinstance(err, ImportError):
            message = _import_error_message(err)
        elif isinstance(err, OSError) and not isinstance(err, ConnectionError):
            message = _os_error_message(err)
        else:
            message = str(err)
        print(f"sciattn {args.command}: error: {' '.join(message.splitlines())}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
