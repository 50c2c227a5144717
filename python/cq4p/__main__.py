"""python -m cq4p {convert, upgrade, inspect, synthetic, check}."""

import argparse
import sys

from cq4p import bundle as bd
from cq4p import check as ck
from cq4p import convert as cv
from cq4p import files as fl
from cq4p import inspection
from cq4p import synthetic
from cq4p import tools
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


def _synthetic(args):
    synthetic.write_llama(args.out, hidden=args.hidden, ffn=args.ffn, vocab=args.vocab,
                          layers=args.layers, seed=args.seed)
    print(f"{args.out}: llama-shaped checkpoint, hidden {args.hidden}, ffn {args.ffn}, "
          f"vocab {args.vocab}, {args.layers} layers")
    return 0


def _check(args):
    results = ck.check_bundle(args.bundle, args.library, rows=args.rows)
    print(f"{'tensor':48} {'kind':10} {'rel. error':>10}")
    worst = 0.0
    for name, kind, error in results:
        print(f"{name:48} {kind:10} {error:10.2e}")
        worst = max(worst, error)
    verdict = "ok" if worst <= ck.TOLERANCE else "FAILED"
    print(f"{len(results)} tensors, worst relative error {worst:.2e} "
          f"(tolerance {ck.TOLERANCE}): {verdict}")
    return 0 if worst <= ck.TOLERANCE else 1


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
    synth = commands.add_parser("synthetic", help="write a small llama-shaped checkpoint")
    synth.add_argument("--out", required=True)
    synth.add_argument("--hidden", type=int, default=512)
    synth.add_argument("--ffn", type=int, default=1536)
    synth.add_argument("--vocab", type=int, default=1024)
    synth.add_argument("--layers", type=int, default=2)
    synth.add_argument("--seed", type=int, default=0)
    synth.set_defaults(run=_synthetic)

    check = commands.add_parser("check", help="a bundle's tensors through a compiled kernel "
                                "library vs an fp32 numpy reference")
    check.add_argument("--bundle", required=True)
    check.add_argument("--library", required=True, help="built by cq4p-compile")
    check.add_argument("--rows", type=int, default=3)
    check.set_defaults(run=_check)
    return main_parser


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (cv.ConvertError, bd.BundleError, fl.FormatError, ck.CheckError,
            tools.ToolError, OSError) as error:
        print(f"cq4p {args.command}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"cq4p {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
