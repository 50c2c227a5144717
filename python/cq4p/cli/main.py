"""cq4p (or python -m cq4p) {convert, upgrade, inspect, synthetic, margin, check,
generate, check-model}."""

import argparse
import os
import sys

from cq4p.native import locate

# Every command needs numpy: a Python without it gets one line naming the fix
# (here, before the modules below import it).
locate.require_numpy()

from cq4p import __version__
from cq4p.cli import check as ck
from cq4p.cli import convert as cv
from cq4p.cli import generate as gn
from cq4p.cli import inspection
from cq4p.cli import upgrade as up
from cq4p.io import bundle as bd
from cq4p.io import reader as rd
from cq4p.model import reference as rf
from cq4p.model import synthetic
from cq4p.native import runtime as native
from cq4p.native import tools

EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 1
EXIT_INTERRUPTED = 130

# Bounds of the numeric options, checked as argparse reads them: the C API's
# types (native.INT32_MAX...) and cq4p-run's own limits.
MAX_STEPS = native.MAX_NEW_TOKENS
MAX_SHAPE = 1 << 20  # synthetic checkpoints: any dimension
MAX_ROWS = 1 << 16


def integer(low, high):
    """An argparse type: an integer in [low, high]."""
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected an integer, found {native.excerpt(repr(text))}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(
                f"expected an integer in [{low}, {high}], found {native.excerpt(text)}")
        return value
    return parse


def number(low=None, high=None, low_open=False):
    """An argparse type: a finite number float32 holds, in [low, high]
    ((low, high] when low_open)."""
    def parse(text):
        try:
            return native.check_float32("value", text, low, high, low_open)
        except native.ArgumentError as error:
            raise argparse.ArgumentTypeError(str(error)[len("value: "):]) from None
    return parse


def _convert(args):
    cv.convert(args.model, args.out, force=args.force, seed=args.seed,
               calibration=args.calibration, legacy=args.legacy, quantizer=args.quantizer)
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
    return inspection.inspect(args.path, sys.stdout, deep=args.deep)


def _synthetic(args):
    try:
        shape = synthetic.default_shape(args.arch, hidden=args.hidden, ffn=args.ffn,
                                        vocab=args.vocab, layers=args.layers, heads=args.heads,
                                        kv_heads=args.kv_heads, head_dim=args.head_dim,
                                        window=args.window)
        shape = shape.resolved(k_multiple=args.arch in synthetic.ARCHITECTURES)
    except ValueError as error:
        raise gn.GenerateError(str(error)) from error
    synthetic.write_model(args.out, args.arch, shape, seed=args.seed)
    print(f"{args.out}: {args.arch} checkpoint, hidden {shape.hidden}, ffn {shape.ffn}, "
          f"vocab {shape.vocab}, {shape.layers} layers, {shape.heads} heads "
          f"({shape.kv_heads} kv) of {shape.head_dim}")
    return 0


def _margin(args):
    oracle = rf.Reference.from_bundle(args.bundle)
    prompt = synthetic.prompt(oracle_config(args.bundle), args.prompt_length, args.seed)
    tokens, margins = rf.greedy_margins(oracle, prompt, args.steps)
    print("greedy: " + " ".join(map(str, tokens)))
    print(f"top-1 minus top-2 logit / logit std over {args.steps} steps after "
          f"{args.prompt_length} tokens: min {margins.min():.3f}, mean {margins.mean():.3f}")
    return 0


def oracle_config(bundle):
    """The bundle's config as synthetic.prompt reads it (a wrapper's own:
    its text_config is found there)."""
    return bd.read_manifest(bundle)["config"]


def _prompt(args):
    if (args.prompt is None) == (args.prompt_ids is None):
        raise gn.GenerateError("give one of --prompt and --prompt-ids")
    return gn.prompt_ids(args.bundle, args.prompt, args.prompt_ids)


def _generate(args):
    if args.prompt is not None and args.prompt_ids is None and gn.has_tokenizer_json(args.bundle):
        gn.generate_text(args.bundle, args.library, args.prompt, args.n, threads=args.threads,
                         context=args.context, temperature=args.temperature, top_k=args.top_k,
                         top_p=args.top_p, seed=args.seed, stop_strings=args.stop,
                         ignore_eos=args.ignore_eos)
        return 0
    gn.generate(args.bundle, args.library, _prompt(args), args.n, threads=args.threads,
                context=args.context, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, seed=args.seed)
    return 0


def _open_tokenizer(args):
    if args.bundle is not None:
        return native.NativeTokenizer(directory=args.bundle)
    config = os.path.join(os.path.dirname(os.path.abspath(args.tokenizer)),
                          "tokenizer_config.json")
    return native.NativeTokenizer(tokenizer_json=args.tokenizer,
                                  tokenizer_config=config if os.path.isfile(config) else None)


def _tokenize(args):
    if (args.text is None) == (args.decode is None):
        raise gn.GenerateError("give a text to encode or --decode IDS")
    with _open_tokenizer(args) as tokenizer:
        if args.decode is not None:
            print(tokenizer.decode(gn.parse_ids(args.decode)))
        else:
            print(" ".join(map(str, tokenizer.encode(args.text, not args.no_special))))
    return 0


def _check_model(args):
    prompt = None
    if args.prompt is not None or args.prompt_ids is not None:
        prompt = _prompt(args)
    ok = gn.check_model(args.bundle, args.library, prompt, steps=args.steps,
                        threads=args.threads, context=args.context, tolerance=args.tolerance,
                        seed=args.seed)
    return 0 if ok else 1


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
    # `cq4p` is the installed command; `python -m cq4p` runs this file.
    prog = "python -m cq4p" if os.path.basename(sys.argv[0]) == "__main__.py" else "cq4p"
    main_parser = argparse.ArgumentParser(prog=prog,
                                          description="CQ4 bundles and the models they hold")
    main_parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = main_parser.add_subparsers(dest="command", required=True)

    convert = commands.add_parser("convert", help="a safetensors checkpoint -> a cq4p bundle")
    convert.add_argument("--model", required=True,
                         help="directory with config.json and *.safetensors")
    convert.add_argument("--out", required=True, help="bundle directory to create")
    convert.add_argument("--force", action="store_true", help="replace an existing --out")
    convert.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0,
                         help="rotation seed (default 0)")
    convert.add_argument("--calibration", help=".npz of per-input-channel mean |activation| "
                         "by tensor name")
    convert.add_argument("--legacy", choices=cv.LEGACY_LAYOUTS,
                         help="write pre-panel CQ4 files in this layout where the shape allows")
    convert.add_argument("--quantizer", choices=cv.QUANTIZERS, default="auto",
                         help="native: the runtime library's multi-threaded quantizer "
                              "(threads: $CQ4P_CONVERT_THREADS, 1 to 1024, default every "
                              "CPU); numpy: the Python one; auto (default): native when the "
                              "library is built. The bundles are the same bytes")
    convert.set_defaults(run=_convert)

    upgrade = commands.add_parser("upgrade", help="rewrite a bundle's legacy CQ4 files as panels")
    upgrade.add_argument("bundle")
    upgrade.set_defaults(run=_upgrade)

    inspect = commands.add_parser("inspect", help="describe a tensor file or a bundle")
    inspect.add_argument("path")
    inspect.add_argument("--deep", action="store_true",
                         help="also check every content rule of FORMAT.md (reads every byte)")
    inspect.set_defaults(run=_inspect)
    synth = commands.add_parser("synthetic", help="write a small checkpoint of a supported "
                                "architecture, with wide greedy margins")
    synth.add_argument("--arch", choices=synthetic.ALL_ARCHITECTURES, default="llama",
                       help="llama, qwen3, gemma3, or a family shaped like a released model: "
                       "llama32 (Llama-3.2-1B), qwen25 (Qwen2.5-0.5B), smollm2 "
                       "(SmolLM2-360M), lfm2 (LFM2-350M), gemma4 (Gemma 4 E2B)")
    synth.add_argument("--out", required=True)
    for option in ("hidden", "ffn", "vocab", "layers", "heads", "kv-heads", "head-dim",
                   "window"):
        synth.add_argument(f"--{option}", type=integer(0 if option == "window" else 1, MAX_SHAPE),
                           help="default: the architecture's")
    synth.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0)
    synth.set_defaults(run=_synthetic)

    margin = commands.add_parser("margin", help="greedy top-1 margins of a bundle's dequantized "
                                 "model on a prompt of synthetic-table tokens")
    margin.add_argument("--bundle", required=True)
    margin.add_argument("--prompt-length", type=integer(1, MAX_STEPS),
                        default=gn.DEFAULT_PROMPT_TOKENS)
    margin.add_argument("--steps", type=integer(0, MAX_STEPS), default=gn.DEFAULT_STEPS)
    margin.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=1)
    margin.set_defaults(run=_margin)

    check = commands.add_parser("check", help="a bundle's tensors through a compiled kernel "
                                "library vs an fp32 numpy reference")
    check.add_argument("--bundle", required=True)
    check.add_argument("--library", required=True, help="built by cq4p-compile")
    check.add_argument("--rows", type=integer(1, MAX_ROWS), default=3)
    check.set_defaults(run=_check)

    def model_command(name, help_text):
        command = commands.add_parser(name, help=help_text)
        command.add_argument("--bundle", required=True)
        command.add_argument("--library", required=True,
                             help="built by cq4p-compile from the bundle's model.mlir")
        command.add_argument("--prompt-ids", help='token ids, e.g. "1 2 3"')
        command.add_argument("--prompt", help="text (the runtime's tokenizer reads the bundle's "
                             "tokenizer.json; a tokenizer.model alone needs "
                             "python3-sentencepiece)")
        command.add_argument("--threads", type=integer(1, native.MAX_THREADS), default=1)
        command.add_argument("--context", type=integer(0, native.INT64_MAX), default=0,
                             help="KV cache positions (default: the runtime's)")
        return command

    generate = model_command("generate", "generate tokens with a compiled model")
    generate.add_argument("-n", type=integer(0, native.MAX_NEW_TOKENS), default=gn.DEFAULT_STEPS,
                          help="tokens to generate")
    generate.add_argument("--temperature", type=number(), default=0.0, help="<= 0: greedy")
    generate.add_argument("--top-k", type=integer(0, native.INT32_MAX), default=0, help="0: off")
    generate.add_argument("--top-p", type=number(0.0, 1.0, low_open=True), default=1.0,
                          help="in (0, 1]; 1: off")
    generate.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0)
    generate.add_argument("--stop", action="append", help="a stop string (text prompts)")
    generate.add_argument("--ignore-eos", action="store_true",
                          help="do not stop at EOS / end of turn (text prompts)")
    generate.set_defaults(run=_generate)

    tokenize = commands.add_parser("tokenize", help="the ids of a text (or the text of ids) "
                                   "through the runtime's tokenizer")
    source = tokenize.add_mutually_exclusive_group(required=True)
    source.add_argument("--bundle", help="a bundle (or model directory) with tokenizer.json")
    source.add_argument("--tokenizer", help="a tokenizer.json (tokenizer_config.json beside it "
                        "is read too)")
    tokenize.add_argument("text", nargs="?", help="the text to encode")
    tokenize.add_argument("--decode", metavar="IDS", help='ids to decode, e.g. "9707 11"')
    tokenize.add_argument("--no-special", action="store_true",
                          help="without the post-processor's ids (BOS)")
    tokenize.set_defaults(run=_tokenize)

    check_model = model_command("check-model", "a compiled model's logits vs the numpy oracle "
                                "of its dequantized weights, step by step")
    check_model.add_argument("--steps", type=integer(0, MAX_STEPS), default=gn.DEFAULT_STEPS)
    check_model.add_argument("--tolerance", type=number(0.0), default=None,
                             help=f"max |logit diff| / logit std (default "
                                  f"{gn.LOGIT_TOLERANCE}, lfm2 "
                                  f"{gn.ARCHITECTURE_TOLERANCE['lfm2']})")
    check_model.add_argument("--seed", type=integer(0, native.UINT64_MAX), default=0,
                             help="of the random prompt used without --prompt(-ids)")
    check_model.set_defaults(run=_check_model)
    return main_parser


def main(argv=None):
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except (cv.ConvertError, bd.BundleError, rd.FormatError, ck.CheckError,
            tools.ToolError, gn.GenerateError, native.NativeError,
            native.LibraryNotFoundError, OSError) as error:
        print(f"cq4p {args.command}: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"cq4p {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, OverflowError,
            MemoryError, RecursionError) as error:
        # A defect of cq4p's own (every input is meant to be refused above
        # by name): still one line, never a traceback.
        print(f"cq4p {args.command}: internal error: {type(error).__name__}: {error}",
              file=sys.stderr)
        return EXIT_INTERNAL

