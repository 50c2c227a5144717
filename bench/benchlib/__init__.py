"""What cq4p's benchmark scripts share.

Each script under bench/ measures, writes its measurements as data (JSON
beside its results .md) and renders the Markdown from that data, so that
`--render-only` re-renders a results file without measuring:

- `machine`: the tree's paths and tools (build, LLVM, QEMU) and the facts of
  the machine a result was measured on;
- `commands`: running a command, failing with its output, and the list of
  commands a results file shows (paths relative to the repository);
- `qemu`: QEMU's execution log (`-d in_asm,exec,nochain`) and the counter's
  output read into executed instructions, and a library's symbols;
- `disasm`: llvm-objdump's output as instructions and their loops;
- `mca`: llvm-mca's cycle estimate of a loop body;
- `timing`: interleaved repetitions, medians and ranges;
- `markdown`: pipe tables rendered and read back;
- `data`: a results file's data (JSON) beside it, and the issue thresholds
  (bench/targets.json) it checks.

Standard library only.
"""
