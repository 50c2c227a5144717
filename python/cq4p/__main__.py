"""python -m cq4p {convert, upgrade, inspect}."""

import argparse
import sys

from cq4p import bundle as bd
from cq4p import convert as cv
from cq4p import files as fl
from cq4p import inspection
from cq4p import upgrade as up

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _convert(args):
    cv.convert(args.model, args.out, force=args.force, seed=args.seed,
               calibration=args.calibration, legacy=args.legacy)
    return 0


def _upgrade(args):
    outcomes = up.upgrade(args.bundle)
    for outcome in outcomes:
        print(outcome)
    upgraded = sum(outcome.action == "upgraded" for outcome in outcomes)
    kept = sum(outcome.action == "kept" for outcome in outcomes)
    print(f"{upgraded} upgraded, {kept} kept as legacy files")
    return 0


def _inspect(args):
    return inspection.inspect(args.path, sys.stdout)


def parser():
    main_parser = argparse.ArgumentParser(prog="python -m cq4p",
                                          description="CQ4 bundles: convert, upgrade, inspect")
    commands = main_parser.add_subparsers(dest="command", required=True)

    convert = commands.add_parser("convert", help="a safetensors checkpoint -> a cq4p bundle")
    convert.add_argument("--model", required=True,
                         help="directory with config.json and *.safetensors")
    convert.add_argument("--out", required=True, help="bundle directory to create")
    convert.add_argument("--force", action="store_true", help="replace an existing --out")
    convert.add_argument("--seed", type=int, default=0, help="rotation seed (default 0)")
    convert.add_argument("--calibration", help=".npz of per-input-channel mean |activation| "
                         "by tensor name")
    convert.add_argument("--legacy", choices=cv.LEGACY_LAYOUTS,
                         help="write pre-panel CQ4 files in this layout where the shape allows")
    convert.set_defaults(run=_convert)

    upgrade = commands.add_parser("upgrade", help="rewrite a bundle's legacy CQ4 files as panels")
    upgrade.add_argument("bundle")
    upgrade.set_defaults(run=_upgrade)

    inspect = commands.add_parser("inspect", help="describe a tensor file or a bundle")
    inspect.add_argument("path")
    inspect.set_defaults(run=_inspect)
    return main_parser


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (cv.ConvertError, bd.BundleError, fl.FormatError, OSError) as error:
        print(f"cq4p {args.command}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"cq4p {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
