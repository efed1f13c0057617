"""What `het-tf bench` runs: its options and configurations."""
import collections

from het_tf.apps import link
from het_tf.apps.bench import accuracy_sweep

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
    ("het-s100", "HetEmbedding, 10% LFU cache, staleness 100, no lookahead",
     ["--mode", "ps", "--staleness", "100", "--no-lookahead"]),
    ("het-s100-check", "HetEmbedding, 10% LFU cache, staleness 100, HET's per-key check",
     ["--mode", "ps", "--staleness", "100", "--sync", "check"]),
    ("het-s100-lookahead", "HetEmbedding, 10% LFU cache, staleness 100, lookahead prefetch, "
     "up to 64 batches staged, whose rows stay while others can go",
     ["--mode", "ps", "--staleness", "100", "--lookahead"]),
    ("het-s100-lookahead1", "HetEmbedding, 10% LFU cache, staleness 100, lookahead with one "
     "batch staged", ["--mode", "ps", "--staleness", "100", "--lookahead",
                      "--lookahead-batches", "1"]),
    ("het-auto", "HetEmbedding, 10% LFU cache, staleness auto (the default)",
     ["--mode", "ps", "--staleness", "auto"]),
    ("hybrid-nocache", "HetEmbedding, cache off, hybrid mode",
     ["--mode", "hybrid", "--cache-capacity", "0"]),
    ("hybrid-s100", "HetEmbedding, 10% LFU cache, staleness 100, hybrid mode, no lookahead",
     ["--mode", "hybrid", "--staleness", "100", "--no-lookahead"]),
    ("hybrid-s100-check", "HetEmbedding, 10% LFU cache, staleness 100, per-key check, hybrid",
     ["--mode", "hybrid", "--staleness", "100", "--sync", "check"]),
    ("hybrid-s100-lookahead", "HetEmbedding, 10% LFU cache, staleness 100, lookahead, hybrid",
     ["--mode", "hybrid", "--staleness", "100", "--lookahead"]),
    ("hybrid-s100-lookahead1", "HetEmbedding, 10% LFU cache, staleness 100, lookahead with "
     "one batch staged, hybrid",
     ["--mode", "hybrid", "--staleness", "100", "--lookahead", "--lookahead-batches", "1"]),
    ("hybrid-nocache-fp16", "HetEmbedding, cache off, hybrid mode, dense allreduce in float16",
     ["--mode", "hybrid", "--cache-capacity", "0", "--allreduce-dtype", "float16"]),
    ("hybrid-s100-lookahead-fp16", "HetEmbedding, 10% LFU cache, staleness 100, lookahead, "
     "hybrid, dense allreduce in float16",
     ["--mode", "hybrid", "--staleness", "100", "--lookahead", "--allreduce-dtype", "float16"]),
    ("het-s100-lookahead-bf16", "HetEmbedding, 10% LFU cache, staleness 100, lookahead, "
     "rows and updates in bfloat16 to and from the PS",
     ["--mode", "ps", "--staleness", "100", "--lookahead", "--wire-dtype", "bfloat16"]),
    ("hybrid-s100-lookahead-bf16", "HetEmbedding, 10% LFU cache, staleness 100, lookahead, "
     "hybrid, rows and updates in bfloat16 to and from the PS",
     ["--mode", "hybrid", "--staleness", "100", "--lookahead", "--wire-dtype", "bfloat16"]),
    ("hybrid-s100-lookahead-bf16-fp16", "HetEmbedding, 10% LFU cache, staleness 100, "
     "lookahead, hybrid, rows in bfloat16 and the dense allreduce in float16",
     ["--mode", "hybrid", "--staleness", "100", "--lookahead", "--wire-dtype", "bfloat16",
      "--allreduce-dtype", "float16"]),
    ("hybrid-s0", "HetEmbedding, staleness 0 (synchronous: the cache's bound at 0), hybrid",
     ["--mode", "hybrid", "--staleness", "0"]),
    ("hybrid-s0-check", "HET's cache at staleness 0: every key checked, every update pushed "
     "at once, hybrid", ["--mode", "hybrid", "--staleness", "0", "--sync", "check"]),
    ("fae", "FAE: 50,000 hot rows replicated on every rank, hot and cold batches, the rest "
     "through a 10% LFU cache at staleness 100, hybrid",
     ["--mode", "hybrid", "--staleness", "100", "--hot-rows", "50000"]),
    ("herald-alloc", "Herald's allocation alone: samples sent to the rank caching their rows "
     "(summaries of up to 65,536 keys every 8 steps), 10% LFU cache at staleness 100, hybrid",
     ["--mode", "hybrid", "--staleness", "100", "--no-lookahead", "--allocate-every", "8",
      "--summary-rows", "65536"]),
    ("herald-alloc-b0", "Herald's allocation alone, stay bonus 0: a sample moves for any "
     "cached row it gains, 10% LFU cache at staleness 100, hybrid",
     ["--mode", "hybrid", "--staleness", "100", "--no-lookahead", "--allocate-every", "8",
      "--summary-rows", "65536", "--stay-bonus", "0"]),
    ("herald-plan", "Herald's plan alone: exact, each rank pushes only the rows another reads "
     "next, 10% LFU cache, hybrid", ["--mode", "hybrid", "--scheduler", "herald"]),
    ("herald", "Herald: allocation and plan, exact, 10% LFU cache, hybrid",
     ["--mode", "hybrid", "--scheduler", "herald", "--allocate-every", "8",
      "--summary-rows", "65536"]),
    ("herald-window", "Herald: allocation and plan over a window of 8 batches, exact, 10% LFU "
     "cache, hybrid", ["--mode", "hybrid", "--scheduler", "herald", "--window", "8",
                       "--allocate-every", "8", "--summary-rows", "65536"]),
)
# Run only behind a link: on loopback the allreduce's bytes cost little.
LINK_ONLY = ("hybrid-nocache-fp16", "hybrid-s100-lookahead-fp16", "het-s100-lookahead-bf16",
             "hybrid-s100-lookahead-bf16", "hybrid-s100-lookahead-bf16-fp16")
# The staleness sweep for AUC: s10 and s100 come from the configurations above.
STALENESS_SWEEP = (("het-s0", "0"), ("het-s10", "10"), ("het-s100", "100"),
                   ("het-s10000", "10000"), ("het-sinf", "inf"), ("het-auto", "auto"))
# The reduced plan: the headline comparisons (TF's PS, cache off and the
# cache with the lookahead, ps and hybrid mode) at fewer samples, so that a
# before/after pair fits one sitting (under 15 minutes on 2 cores).
REDUCED = ("keras-ps", "het-nocache", "het-s100-lookahead", "hybrid-nocache",
           "hybrid-s100-lookahead")
REDUCED_SAMPLES = (300_000, 20_000)
CACHE_FRACTIONS = (0.01, 0.02, 0.05, 0.1, 0.15, 0.2)
MODELS = ("wdl", "deepfm", "dcn")
DIMS = (16, 128)  # het-tf train's default, and HET's paper's
FULL_PLAN_LINK = "100mbit"
# Held-out samples evaluated at each tenth of training, for time to accuracy.
TIMELINE_SAMPLES = 10240


class Section(collections.namedtuple("Section", "model dim link")):
    """One (model, dim, link) of a benchmark: every configuration runs in it."""

    @property
    def key(self):
        return f"{self.model}-d{self.dim}-{self.link or 'loopback'}"

    @property
    def title(self):
        return f"{self.model.upper()}, dim {self.dim}, {self.link or 'loopback'}"


def sections(args, link_rate):
    """The sections to run, given the link rate this machine can shape (None:
    loopback only)."""
    if args.plan == "full":
        links = (None, link_rate) if link_rate else (None,)
        return [Section(m, d, r) for r in links for m in MODELS for d in DIMS]
    return [Section(m, d, link_rate) for m in args.model for d in args.dim]


def add_arguments(p):
    p.add_argument("--model", choices=MODELS, nargs="+", default=["wdl"],
                   help="one or several models: the report has a section for each (model, "
                   "dim)")
    p.add_argument("--dim", type=int, nargs="+", default=list(DIMS),
                   help="one or several embedding sizes (default 16 128)")
    p.add_argument("--plan", choices=("default", "reduced", "full"), default="default",
                   help="full: WDL, DeepFM and DCN at dims 16 and 128, on loopback and behind "
                   f"--link (default {FULL_PLAN_LINK}), in place of --model and --dim; "
                   f"reduced: only {', '.join(REDUCED)} (unless --only), "
                   f"{REDUCED_SAMPLES[0]:,} samples a run and no miss-rate curve")
    p.add_argument("--timeline-samples", type=int, default=TIMELINE_SAMPLES,
                   help="held-out samples evaluated at each tenth of training, for AUC "
                   "against time (0: off)")
    p.add_argument("--target-share", type=float, default=0.99,
                   help="time to accuracy is measured to this share of the best AUC any "
                   "configuration of a section reached")
    p.add_argument("--samples", type=int,
                   help="training samples per run (default 1,000,000; with --plan reduced, "
                   f"{REDUCED_SAMPLES[0]:,}; with --sweep, the sweep size's)")
    p.add_argument("--eval-samples", type=int,
                   help="held-out samples per run (default 100,000; with --plan reduced, "
                   f"{REDUCED_SAMPLES[1]:,}; with --sweep, the sweep size's)")
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
    link.add_arguments(p, "the clusters")


def resolve(args):
    """Fills --samples and --eval-samples from the sweep size or the defaults."""
    samples, eval_samples = (accuracy_sweep.SIZES[args.sweep_size] if args.sweep
                             else REDUCED_SAMPLES if args.plan == "reduced"
                             else (1_000_000, 100_000))
    if args.plan == "reduced" and not args.only:
        args.only = list(REDUCED)
    args.samples = samples if args.samples is None else args.samples
    args.eval_samples = eval_samples if args.eval_samples is None else args.eval_samples
    if args.samples < 1 or args.eval_samples < 1:
        raise ValueError("--samples and --eval-samples must be positive")
    if args.sweep and (args.repeats < 1 or args.link):
        raise ValueError("--sweep takes --repeats >= 1 and no --link")
    if args.sweep:  # accuracy at the end only: no evaluations along the way
        args.timeline_samples = 0
    names = (set(accuracy_sweep.cells()) if args.sweep
             else {c[0] for c in CONFIGURATIONS} | {n for n, _ in STALENESS_SWEEP})
    for name in args.only or ():
        if name not in names:
            raise ValueError(f"--only {name!r}: no such configuration"
                             + (" of the sweep (OPTIMIZER-SETTING, such as adagrad-s100)"
                                if args.sweep else ""))
        if name in LINK_ONLY and not args.link and args.plan != "full" and not args.sweep:
            raise ValueError(f"--only {name!r} runs behind a link only: give --link")
    if any(d < 1 for d in args.dim):
        raise ValueError(f"--dim must be positive, got {args.dim}")
    if args.timeline_samples < 0:
        raise ValueError(f"--timeline-samples must be >= 0, got {args.timeline_samples}")
    if not 0 < args.target_share <= 1:
        raise ValueError(f"--target-share must be in (0, 1], got {args.target_share}")
    # A bad rate or delay is the caller's error, found before any folder is made.
    link.check_arguments(args)


def common_args(args, section):
    """The `het-tf train` arguments every run of one section shares."""
    return ["--model", section.model, "--dim", str(section.dim), "--samples", str(args.samples),
            "--eval-samples", str(args.eval_samples), "--ps", str(args.ps), "--workers",
            str(args.workers), "--batch-size", str(args.batch_size), "--scale", str(args.scale),
            "--zipf", str(args.zipf), "--timeline-samples", str(args.timeline_samples),
            "--no-save"]


def section_plan(args, section, first):
    """(name, `het-tf train` arguments) of every configuration to run in a
    section. The staleness sweep's extra runs go in the first section only:
    they measure accuracy, which needs no second link or size."""
    wanted = set(args.only or [])
    plan = [(name, extra) for name, _, extra in CONFIGURATIONS]
    if first:
        plan += [(name, ["--mode", "ps", "--staleness", s]) for name, s in STALENESS_SWEEP
                 if name not in dict(plan)]
    plan = [(name, extra) for name, extra in plan if not wanted or name in wanted]
    if not section.link:
        return [(name, extra) for name, extra in plan if name not in LINK_ONLY]
    # A local run has no cluster to shape.
    shaped = ["--link", section.link] + (["--latency", args.latency] if args.latency else [])
    return [(name, extra + shaped if "local" not in extra else extra) for name, extra in plan]
