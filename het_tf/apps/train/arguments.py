"""`het-tf train`'s command line: the options, their checks and the run folder."""
import argparse
import datetime
import glob
import math
import os
import sys

from het_tf.apps import link
from het_tf.distribute.allreduce_dtype import check_allreduce_dtype
from het_tf.runtime import combinations
from het_tf.runtime.config import LOOKAHEAD_BATCHES, check_window, parse_stay_bonus
from het_tf.runtime.wire_dtype import check_wire_dtype

MODES = combinations.MODES
DEFAULT_DIM = 16
# What argparse and the het-tf command add to the parsed options.
_COMMAND_FIELDS = ("run", "command_name", "train_argv", "hot")


def options(args, leave_out=()):
    """The parsed options of a het-tf command, for the record."""
    return {k: v for k, v in vars(args).items() if k not in _COMMAND_FIELDS + tuple(leave_out)}


def default_run_dir(name):
    """runs/NAME-TIME under the current folder."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.abspath(os.path.join("runs", f"{name}-{stamp}"))


def _cache_capacity(text):
    value = float(text)
    if value < 0 or (value >= 1 and not value.is_integer()):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a fraction in (0, 1) of the vocabulary, a row count, or 0 for no "
            "cache")
    return value if 0 < value < 1 else int(value)


def _staleness(text):
    """'auto', None (unbounded) or an int, checked by the layer's own rule."""
    from het_tf.runtime.config import AUTO, UNBOUNDED, parse_staleness

    if text.strip().lower() == AUTO:
        return AUTO
    try:
        bound = parse_staleness(text, "--staleness")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return None if bound == UNBOUNDED else bound


def _positive(text):
    value = int(float(text))
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number")
    return value


def add_arguments(p):
    p.add_argument("--model", choices=("wdl", "deepfm", "dcn"), default="wdl")
    p.add_argument("--data", default="synthetic",
                   help="'synthetic', or Criteo TSV / Parquet (*.parquet) files: a path or glob")
    p.add_argument("--eval-data", help="held-out files; by default 1 batch in 20 of --data is "
                   "held out (synthetic data has its own held-out stream)")
    p.add_argument("--mode", choices=MODES, default="local")
    p.add_argument("--ps", type=_positive, default=1, help="PS tasks of a local cluster")
    p.add_argument("--workers", type=_positive, default=2,
                   help="workers (ps mode) or Horovod ranks (hybrid mode) of a local cluster")
    link.add_arguments(p, "the local cluster that ps or hybrid mode starts")
    p.add_argument("--embedding", choices=("het", "keras", "tfra"), default="het",
                   help="'keras' trains tf_keras.layers.Embedding instead, 'tfra' "
                   "TensorFlow Recommenders-Addons' dynamic embedding (baselines)")
    p.add_argument("--cache-capacity", type=_cache_capacity, default=0.1,
                   help="rows cached per worker: a fraction of the vocabulary, a row count, "
                   "or 0 for no cache (default 0.1)")
    p.add_argument("--cache-policy", choices=("lfu", "lru", "lfu_opt"), default="lfu")
    p.add_argument("--staleness", type=_staleness, default="auto",
                   help="bound on cached rows' staleness in updates, 'inf', or 'auto' (the "
                   "default: up to 100, and at most a tenth of each worker's steps so far)")
    # "herald" is the scheduler's old spelling, kept for one release.
    p.add_argument("--sync", choices=("refresh", "check", "herald"), default="refresh",
                   help="the protocol, how cached lookups meet the shards: 'refresh' (only "
                   "misses travel; the shards send fresh rows of copies past the bound) or "
                   "'check' (HET's: every id with its clock)")
    p.add_argument("--scheduler", choices=("herald",), default=None,
                   help="what decides when rows move, beside the protocol: 'herald' (exact, "
                   "no staleness: each rank pushes only the rows another rank reads next; "
                   "hybrid or local mode, docs/herald.md); none by default (the staleness "
                   "bounds decide)")
    p.add_argument("--window", type=int, default=1,
                   help="--scheduler herald: the batches its plan looks ahead over, the step's own "
                   "and the next window - 1, which the input pipeline stages (1: none, the "
                   "default; the lookahead is on with more)")
    p.add_argument("--allocate-every", type=int, default=0,
                   help="Herald's location-aware allocation (hybrid mode, 2 ranks or more): "
                   "each step's samples train on the rank whose cache holds most of their "
                   "rows, the caches' summaries shared every this many steps (0: off)")
    p.add_argument("--summary-rows", type=int, default=65536,
                   help="the most used keys of each cache that the allocation shares, as a "
                   "Bloom filter of 10 bits a key")
    p.add_argument("--stay-bonus", default="auto",
                   help="the cached rows a sample must gain to leave the rank that read it "
                   "('auto', the default: the rows its own bytes are worth; 0 moves it for "
                   "any gain)")
    p.add_argument("--allreduce-dtype", default="float32",
                   help="hybrid mode: the type the dense gradients cross the allreduce in, "
                   "float32 (the default) or float16 (half the bytes, with a dynamic loss "
                   "scale; docs/hybrid.md)")
    p.add_argument("--wire-dtype", default="float32",
                   help="the type the caches' rows and updates travel in to and from the "
                   "PS tasks: float32 (the default), bfloat16 or float16 (2 bytes a float; "
                   "the rounding stays on the worker and joins the row's next push; "
                   "docs/consistency.md)")
    p.add_argument("--lookahead", action=argparse.BooleanOptionalAction, default=None,
                   help="the input pipeline stages each batch's ids a step ahead, and each "
                   "training step prefetches the next batch's rows while it computes "
                   "(het_tf.lookahead; the default wherever a HetEmbedding cache syncs by "
                   "refresh)")
    p.add_argument("--lookahead-batches", type=int, default=LOOKAHEAD_BATCHES,
                   help="with the lookahead, the most batches the input pipeline stages ahead "
                   f"(1 to {LOOKAHEAD_BATCHES}): a row one of them reads is evicted only when "
                   "no other can be, the one read furthest ahead first (het_tf.lookahead; "
                   f"default {LOOKAHEAD_BATCHES})")
    p.add_argument("--hot-rows", type=int, default=0,
                   help="FAE: replicate this many of the most accessed rows on every rank "
                   "(hybrid and local mode; ps mode pins them in every worker's cache), found "
                   "by profiling a sample of the training data first; hot and cold batches "
                   "then train apart (docs/fae.md; 0: off)")
    p.add_argument("--hot-bytes", type=int, default=0,
                   help="FAE: the hot rows' budget in bytes of row state instead of rows")
    p.add_argument("--hot-share", type=float, default=0.05,
                   help="FAE: the share of the training batches the profile counts")
    p.add_argument("--max-rows", type=_positive, default=None,
                   help="the most rows each embedding table may hold, split over the PS "
                   "tasks (default: no limit)")
    p.add_argument("--on-full", choices=("refuse", "evict"), default="refuse",
                   help="what a step that would pass --max-rows does: 'refuse' (fails, "
                   "changing nothing; the default) or 'evict' (the least used rows no cache "
                   "holds make room)")
    p.add_argument("--eviction", choices=("lru", "lfu"), default="lru",
                   help="--on-full evict: least recently ('lru', the default) or least often "
                   "('lfu') used rows go first")
    p.add_argument("--ttl", type=_positive, default=None,
                   help="seconds after which an embedding row no step used (and no cache "
                   "holds) is dropped (default: never)")
    p.add_argument("--admit-after", type=_positive, default=None,
                   help="training steps that must look an id up before it becomes an "
                   "embedding row; until then it reads zeros and its gradients are dropped "
                   "(default: the first; the lookahead is then off by default)")
    p.add_argument("--samples", type=_positive, default=1_000_000,
                   help="training samples, all workers together")
    p.add_argument("--eval-samples", type=int, default=100_000,
                   help="held-out samples to evaluate on (0: skip)")
    p.add_argument("--timeline-samples", type=int, default=0,
                   help="also evaluate this many held-out samples (the same ones each time) at "
                   "the end of each tenth of training, for AUC against training time, as the "
                   "workers' caches hold the model (metrics.json 'timeline'; 0: off)")
    p.add_argument("--eval-before-flush", action="store_true",
                   help="also evaluate before the caches' pending updates are pushed, as the "
                   "workers' own copies stand (metrics.json 'before_flush')")
    p.add_argument("--batch-size", type=_positive, default=1024, help="per worker")
    p.add_argument("--dim", type=_positive, default=DEFAULT_DIM, help="embedding size")
    p.add_argument("--optimizer", choices=("adagrad", "adam", "sgd", "ftrl"), default="adagrad",
                   help="for the dense weights and the tables")
    p.add_argument("--learning-rate", type=float, default=0.05)
    p.add_argument("--scale", type=float, default=0.01,
                   help="synthetic data: scale of Criteo's large fields (1 = 33.76M ids)")
    p.add_argument("--zipf", type=float, default=1.1, help="synthetic data: Zipf exponent")
    p.add_argument("--drift", type=float, default=0.0,
                   help="synthetic data: ids the popularity of each large field moves per "
                   "sample of a worker's stream, new ids rising as old ones fade; held-out data "
                   "is drawn as the streams stand where training ends (default 0: no drift)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--on-malformed", choices=("skip", "fail"), default="skip")
    p.add_argument("--steps-per-execution", type=_positive, default=8)
    p.add_argument("--run-dir", help="where to write the run (default runs/MODEL-MODE-TIME)")
    p.add_argument("--no-save", action="store_true",
                   help="write metrics.json only: no checkpoint, no export")
    p.add_argument("--export-every", type=_positive, metavar="STEPS",
                   help="also export a numbered SavedModel version into RUN_DIR/export every "
                   "STEPS steps while training (a step: one worker's batch in ps mode, every "
                   "rank's in hybrid mode), each a consistent cut that TF Serving can load")
    p.add_argument("--keep-versions", type=_positive, metavar="N",
                   help="keep only the newest N versions in RUN_DIR/export (default: all)")
    p.add_argument("--checkpoint-every", type=_positive, metavar="STEPS",
                   help="also save a checkpoint into RUN_DIR/checkpoint every STEPS steps "
                   "while training (the newest is kept, with the checkpoints its chain needs)")
    p.add_argument("--full-every", type=_positive, metavar="N",
                   help="checkpoints write only the rows changed, added, evicted or expired "
                   "since the one before, and every N-th is full (default: every one full)")


def run_dir(args):
    if args.run_dir:
        return os.path.abspath(args.run_dir)
    return default_run_dir(f"{args.model}-{args.mode}")


def check(args):
    if args.data != "synthetic" and not _matches(args.data):
        raise ValueError(f"--data {args.data!r}: no such file (give 'synthetic' or Criteo "
                         "TSV / Parquet files)")
    if args.eval_data and not _matches(args.eval_data):
        raise ValueError(f"--eval-data {args.eval_data!r}: no such file")
    _check_drift(args)
    if args.eval_samples < 0:
        raise ValueError(f"--eval-samples must be >= 0, got {args.eval_samples}")
    if args.timeline_samples < 0:
        raise ValueError(f"--timeline-samples must be >= 0, got {args.timeline_samples}")
    if not (args.learning_rate > 0 and math.isfinite(args.learning_rate)):
        raise ValueError(f"--learning-rate must be > 0, got {args.learning_rate}")
    link.check_arguments(args)
    if args.link and args.mode == "local":
        raise ValueError("--link shapes the local cluster that ps or hybrid mode starts by "
                         "itself; local mode has none")
    _check_hot(args)
    check_allreduce_dtype(args.allreduce_dtype, "--allreduce-dtype")
    check_wire_dtype(args.wire_dtype, "--wire-dtype")
    if args.allreduce_dtype != "float32" and args.mode != "hybrid":
        raise ValueError(f"--allreduce-dtype is hybrid mode's (its dense allreduce); "
                         f"--mode {args.mode} has none")
    _rename_sync(args)
    _check_herald(args)
    _check_combination(args)
    if args.no_save and (args.export_every or args.keep_versions):
        raise ValueError("--export-every and --keep-versions write versions; --no-save "
                         "writes none")
    if args.no_save and (args.checkpoint_every or args.full_every):
        raise ValueError("--checkpoint-every and --full-every write checkpoints; --no-save "
                         "writes none")
    if args.full_every and args.embedding != "het":
        raise ValueError(f"--full-every writes HetEmbedding tables incrementally; "
                         f"--embedding {args.embedding} has none")
    if args.samples < args.batch_size:
        raise ValueError(f"--samples ({args.samples}) is less than one batch "
                         f"({args.batch_size})")
    parquet = [f for f in (args.data, args.eval_data) if f and f.endswith(".parquet")]
    if parquet and args.mode == "ps":
        from het_tf.data.criteo_parquet import reads_on_remote_workers

        if not reads_on_remote_workers():
            raise ValueError(
                f"{parquet[0]!r}: in ps mode the workers read Parquet with tensorflow-io, "
                "which this TensorFlow cannot load (it supports 2.16). Use --mode local or "
                "hybrid (their processes read Parquet with pyarrow), or TSV files")


def _check_drift(args):
    # The generator's own rule; imported here, as it imports TensorFlow,
    # which --help does without.
    from het_tf.data.synthetic import check_drift

    check_drift(args.drift, "--drift")
    if args.drift and args.data != "synthetic":
        raise ValueError(f"--drift with --data {args.data!r}: the drift is the synthetic "
                         "data's; files hold the ids they hold")


def _rename_sync(args):
    """--sync herald is --scheduler herald's old spelling: it still works for
    one release, with a warning on stderr."""
    if args.sync != "herald":
        return
    if args.scheduler not in (None, "herald"):
        raise ValueError("--sync herald is --scheduler herald; give --scheduler alone")
    print("het-tf train: --sync herald is deprecated and goes in the next release: use "
          "--scheduler herald", file=sys.stderr)
    args.sync, args.scheduler = "refresh", "herald"


def _check_herald(args):
    """Herald's own options: the window and the allocation's."""
    # The window's bounds are the layer's (CacheConfig), checked here first.
    check_window(args.window, "--window")
    if args.allocate_every < 0:
        raise ValueError(f"--allocate-every must be >= 0 (0: off), got {args.allocate_every}")
    if not args.allocate_every:
        if args.stay_bonus != "auto":
            raise ValueError("--stay-bonus is the allocation's: it needs --allocate-every")
        return
    if args.summary_rows < 1:
        raise ValueError(f"--summary-rows must be a positive number of keys, got "
                         f"{args.summary_rows}")
    # The bonus's bounds are the allocation's, checked here first.
    parse_stay_bonus(args.stay_bonus, "--stay-bonus")


def _check_combination(args):
    """The options against the table of what goes together, which also
    says whether the lookahead is on where it is not asked for either way."""
    combination = combinations.Combination(
        embedding=args.embedding, mode=args.mode, workers=args.workers,
        cache=combinations.caches(args.cache_capacity, args.staleness == 0, args.sync,
                                  args.scheduler),
        sync=args.sync, scheduler=args.scheduler, staleness=args.staleness != "auto",
        window=args.window,
        hot_rows=args.hot, lookahead=args.lookahead, allocation=bool(args.allocate_every),
        evict=args.on_full == "evict" or args.ttl is not None,
        admits=args.admit_after is not None, wire_dtype=args.wire_dtype)
    combinations.check(combination, combinations.spell_flag, "")
    if args.on_full == "evict" and args.max_rows is None:
        raise ValueError("--on-full evict needs --max-rows, the limit eviction keeps to")
    for flag, value in (("--max-rows", args.max_rows), ("--ttl", args.ttl),
                        ("--admit-after", args.admit_after)):
        if value is not None and args.embedding != "het":
            raise ValueError(f"{flag} with --embedding {args.embedding}: it is "
                             "HetEmbedding's")
    if args.lookahead is None:
        args.lookahead = combinations.stages(combination)


def _check_hot(args):
    """FAE's options; args.hot says whether they are on."""
    if args.hot_rows < 0 or args.hot_bytes < 0:
        raise ValueError("--hot-rows and --hot-bytes must be >= 0")
    if args.hot_rows and args.hot_bytes:
        raise ValueError("give one budget, --hot-rows or --hot-bytes, not both")
    args.hot = bool(args.hot_rows or args.hot_bytes)
    if not args.hot:
        return
    if not 0 < args.hot_share <= 1:
        raise ValueError(f"--hot-share must be in (0, 1], got {args.hot_share}")


def _matches(pattern):
    return bool(glob.glob(pattern))
