"""What `het-tf bench` runs: its options and configurations."""
from het_tf.apps.bench import accuracy_sweep
from het_tf.apps.link import parse_rate

# (name, what it is, `het-tf train` arguments). "limit" is the same model
# with plain Embedding in one process: the no-communication limit.
CONFIGURATIONS = (
    ("limit", "tf_keras Embedding, one process, no cluster (no-communication limit)",
     ["--mode", "local", "--embedding", "keras"]),
    ("keras-ps", "tf_keras Embedding under ParameterServerStrategy, variable partitioner",
     ["--mode", "ps", "--embedding", "keras"]),
    ("tfra", "TFRA 0.8.1 dynamic_embedding Keras layer",
     ["--mode", "ps", "--embedding", "tfra"]),
    ("het-nocache", "HetEmbedding, cache off", ["--mode", "ps", "--cache-capacity", "0"]),
    ("het-s10", "HetEmbedding, 10% LFU cache, staleness 10", ["--mode", "ps", "--staleness", "10"]),
    ("het-s100", "HetEmbedding, 10% LFU cache, staleness 100",
     ["--mode", "ps", "--staleness", "100"]),
    ("het-auto", "HetEmbedding, 10% LFU cache, staleness auto (the default)",
     ["--mode", "ps", "--staleness", "auto"]),
    ("hybrid-s100", "HetEmbedding, 10% LFU cache, staleness 100, hybrid mode",
     ["--mode", "hybrid", "--staleness", "100"]),
)
# The staleness sweep for AUC: s10 and s100 come from the configurations above.
STALENESS_SWEEP = (("het-s0", "0"), ("het-s10", "10"), ("het-s100", "100"),
                   ("het-s10000", "10000"), ("het-sinf", "inf"), ("het-auto", "auto"))
CACHE_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2)


def add_arguments(p):
    p.add_argument("--model", choices=("wdl", "deepfm", "dcn"), default="wdl")
    p.add_argument("--samples", type=int,
                   help="training samples per run (default 1,000,000; with --sweep, the "
                   "sweep size's)")
    p.add_argument("--eval-samples", type=int,
                   help="held-out samples per run (default 100,000; with --sweep, the sweep "
                   "size's)")
    p.add_argument("--sweep", action="store_true",
                   help="instead of the configurations: held-out accuracy of SGD, Adagrad "
                   "and Adam at staleness 0 (the cache-off path), 10, 100, 10,000 and auto, "
                   "--repeats seeds each, as mean and spread (docs/benchmarks.md)")
    p.add_argument("--sweep-size", choices=sorted(accuracy_sweep.SIZES), default="reduced",
                   help="reduced: %s training samples a run; full: %s" % tuple(
                       f"{accuracy_sweep.SIZES[k][0]:,}" for k in ("reduced", "full")))
    p.add_argument("--repeats", type=int, default=3, help="--sweep: seeds per setting")
    p.add_argument("--ps", type=int, default=1)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--scale", type=float, default=0.01)
    p.add_argument("--zipf", type=float, default=1.1)
    p.add_argument("--out", help="output folder (default runs/bench-TIME)")
    p.add_argument("--only", nargs="+", metavar="NAME",
                   help="run only these configurations (names as in the report; with "
                   "--sweep, OPTIMIZER-SETTING such as adagrad-s100)")
    p.add_argument("--run-timeout", type=int, default=1200, help="seconds per training run")
    p.add_argument("--link", metavar="RATE",
                   help="put each task of the ps-mode clusters in a network namespace of its "
                   "own behind a tc-shaped link of RATE (for example 1gbit, 100mbit); needs "
                   "root, otherwise the benchmark says so and runs on loopback")


def resolve(args):
    """Fills --samples and --eval-samples from the sweep size or the defaults."""
    samples, eval_samples = (accuracy_sweep.SIZES[args.sweep_size] if args.sweep
                             else (1_000_000, 100_000))
    args.samples = samples if args.samples is None else args.samples
    args.eval_samples = eval_samples if args.eval_samples is None else args.eval_samples
    if args.samples < 1 or args.eval_samples < 1:
        raise ValueError("--samples and --eval-samples must be positive")
    if args.sweep and (args.repeats < 1 or args.link):
        raise ValueError("--sweep takes --repeats >= 1 and no --link")
    names = (set(accuracy_sweep.cells()) if args.sweep
             else {c[0] for c in CONFIGURATIONS} | {n for n, _ in STALENESS_SWEEP})
    for name in args.only or ():
        if name not in names:
            raise ValueError(f"--only {name!r}: no such configuration"
                             + (" of the sweep (OPTIMIZER-SETTING, such as adagrad-s100)"
                                if args.sweep else ""))
    if args.link:  # a bad rate is the caller's error, found before any folder is made
        parse_rate(args.link)


def common_args(args):
    """The `het-tf train` arguments every run of one benchmark shares."""
    return ["--model", args.model, "--samples", str(args.samples), "--eval-samples",
            str(args.eval_samples), "--ps", str(args.ps), "--workers", str(args.workers),
            "--batch-size", str(args.batch_size), "--scale", str(args.scale), "--zipf",
            str(args.zipf), "--no-save"]


def ps_plan(args):
    """(name, `het-tf train` arguments) of every configuration to run."""
    wanted = set(args.only or [])
    plan = [(name, extra) for name, _, extra in CONFIGURATIONS]
    plan += [(name, ["--mode", "ps", "--staleness", s]) for name, s in STALENESS_SWEEP
             if name not in dict(plan)]
    return [(name, extra) for name, extra in plan if not wanted or name in wanted]
