"""The het-tf command: info, server, launch, train, bench."""
import argparse
import json
import sys


def _info(_args):
    import tensorflow as tf

    from het_tf import _op_library

    report = {"tensorflow": tf.__version__, "op_library": _op_library.library_path()}
    try:
        ops = _op_library.load()
        report["op_library_built_for"] = ops.het_build_info().numpy().decode()
        report["ops"] = sorted(n for n in dir(ops) if n.startswith("het_"))
    except _op_library.OpLibraryError as e:
        report["error"] = str(e)
    print(json.dumps(report, indent=2))
    return 1 if "error" in report else 0


def _server(_args):
    from het_tf.distribute import server

    return server.serve()


def _launch(args):
    from het_tf.apps import launch, link

    link.check_arguments(args)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("het-tf launch: give the chief's command after --", file=sys.stderr)
        return 2
    if args.hybrid and args.evaluator:
        print("het-tf launch: --evaluator is for ParameterServerStrategy clusters, not --hybrid",
              file=sys.stderr)
        return 2
    return launch.launch(args.ps, args.workers, command, evaluator=args.evaluator,
                         hybrid=args.hybrid, link=args.link, latency=args.latency)


def _train(args):
    from het_tf.apps import train

    return train.run(args, args.train_argv)


def _bench(args):
    from het_tf.apps import bench

    return bench.run(args)


VERBOSE_HELP = ("show TensorFlow's own log (its C++ log is errors only by default, unless "
                "TF_CPP_MIN_LOG_LEVEL is set)")


def _parser():
    """The command line. Nothing here imports TensorFlow: --help answers at once."""
    from het_tf.apps import link
    from het_tf.apps.bench import add_arguments as add_bench_arguments
    from het_tf.apps.train import add_arguments as add_train_arguments

    parser = argparse.ArgumentParser(prog="het-tf", description=__doc__)
    parser.add_argument("--verbose", action="store_true", help=VERBOSE_HELP)
    # Also after the command's name; SUPPRESS keeps the one before it.
    verbose = argparse.ArgumentParser(add_help=False)
    verbose.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                         help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command_name", required=True)

    def command(name, help, run, tensorflow=True):
        p = sub.add_parser(name, help=help, parents=[verbose])
        p.set_defaults(run=run, tensorflow=tensorflow)
        return p

    command("info", "show versions and whether the op library loads", _info)
    command("server", "run the ps or worker task that TF_CONFIG names, until SIGTERM", _server)
    # The launcher imports TensorFlow (the cluster's job names and Horovod's
    # environment come from modules that do): through the filter, as every
    # command's, so its start-up noise stays out of the launcher's stderr.
    launch = command("launch", "start a local cluster on 127.0.0.1 and run a command as its "
                     "chief", _launch)
    launch.add_argument("--ps", type=int, default=1, help="parameter-server tasks (default 1)")
    launch.add_argument("--workers", type=int, default=2, help="worker tasks (default 2)")
    launch.add_argument("--evaluator", action="store_true",
                        help="also run the command as an evaluator task")
    launch.add_argument("--hybrid", action="store_true",
                        help="run the command as --workers Horovod ranks (Gloo, started as "
                        "horovodrun would) that share the PS tasks' tables; HET_TF_PS names the "
                        "PS tasks")
    link.add_arguments(launch, "the cluster")
    launch.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    add_train_arguments(command("train", "train WDL, DeepFM or DCN on Criteo-shaped data and "
                                "write a checkpoint, a SavedModel and metrics to a run folder",
                                _train))
    add_bench_arguments(command("bench", "benchmark HetEmbedding against TensorFlow's own PS "
                                "and TFRA on the same model, data and cluster", _bench))
    return parser


def main(argv=None):
    from het_tf.apps import quiet

    argv = sys.argv[1:] if argv is None else list(argv)
    args = _parser().parse_args(argv)
    # What follows the command's name, for the chief or ranks it starts.
    args.train_argv = argv[argv.index(args.command_name) + 1:]
    quiet.configure(args.verbose)
    if args.tensorflow:
        quiet.import_tensorflow()
    try:
        return args.run(args)
    except ValueError as e:  # bad TF_CONFIG or arguments: say so, no traceback
        print(f"het-tf {args.command_name}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
