"""The het-tf command."""
import argparse
import json
import sys


def _info(_args):
    import tensorflow as tf

    from het_tf import _op_library

    lib = _op_library.library_path()
    report = {"tensorflow": tf.__version__, "op_library": lib}
    try:
        ops = _op_library.load()
        report["op_library_built_for"] = ops.het_build_info().numpy().decode()
        report["ops"] = sorted(n for n in dir(ops) if n.startswith("het_"))
    except _op_library.OpLibraryError as e:
        report["error"] = str(e)
    print(json.dumps(report, indent=2))
    return 1 if "error" in report else 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="het-tf", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="show versions and whether the op library loads").set_defaults(
        run=_info)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
