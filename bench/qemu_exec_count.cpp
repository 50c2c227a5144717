//===- qemu_exec_count.cpp - QEMU execution log -> executed blocks -------===//
//
// bench/model pipes `qemu-aarch64 -d in_asm,exec,nochain` into this counter
// instead of writing the log to a file: for a realistic model the log runs
// to hundreds of gigabytes, the counts it yields to a few kilobytes.
//
//   cq4p-qemu-exec-count < log > counts
//
// Reads the log from stdin. Each translated block (an `IN:` section) is one
// translation, its instruction addresses kept; each `Trace` line is one
// execution of the block translated last at that address. Executions are
// counted per phase, a phase starting at each execution of a block that
// holds the marker instruction `hint #0x7f` (d5032fff, a NOP the driver's
// marker function executes; the log names no symbols). Writes, in
// hexadecimal:
//
//   tb ID PC PC ...          one line per translation: its instructions
//   phase N                  then, per block executed in phase N:
//   ID COUNT
//
// Exits non-zero, naming the line, on a trace of an address never translated.
//
//===----------------------------------------------------------------------===//

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <vector>

int main(int argc, char **) {
  if (argc != 1) {
    std::fprintf(stderr, "usage: cq4p-qemu-exec-count < log > counts\n");
    return 2;
  }
  std::vector<std::vector<uint64_t>> translations;
  std::vector<bool> marker; // per translation: holds the marker instruction
  std::unordered_map<uint64_t, size_t> latest; // block address -> translation
  std::vector<std::unordered_map<size_t, uint64_t>> phases;
  bool inBlock = false;
  static char line[1 << 16];
  uint64_t lineNumber = 0;
  while (std::fgets(line, sizeof line, stdin)) {
    ++lineNumber;
    if (line[0] == 'T' && std::strncmp(line, "Trace", 5) == 0) {
      inBlock = false;
      // Trace 0: 0xHOST [CFLAGS/PC/FLAGS/...] ...
      const char *slash = std::strchr(line, '[');
      slash = slash ? std::strchr(slash, '/') : nullptr;
      if (!slash)
        continue;
      uint64_t pc = std::strtoull(slash + 1, nullptr, 16);
      auto it = latest.find(pc);
      if (it == latest.end()) {
        std::fprintf(stderr,
                     "cq4p-qemu-exec-count: line %" PRIu64
                     ": block 0x%" PRIx64 " executed but never translated\n",
                     lineNumber, pc);
        return 1;
      }
      if (marker[it->second])
        phases.emplace_back();
      else if (!phases.empty())
        ++phases.back()[it->second];
      continue;
    }
    if (line[0] == 'I' && std::strncmp(line, "IN:", 3) == 0) {
      inBlock = true;
      translations.emplace_back();
      marker.push_back(false);
      continue;
    }
    // 0xADDR:  ENCODING  mnemonic ...
    if (inBlock && line[0] == '0' && line[1] == 'x') {
      char *end = nullptr;
      uint64_t pc = std::strtoull(line + 2, &end, 16);
      if (!end || *end != ':')
        continue;
      std::vector<uint64_t> &block = translations.back();
      if (block.empty())
        latest[pc] = translations.size() - 1;
      block.push_back(pc);
      const char *encoding = end + 1;
      while (*encoding == ' ')
        ++encoding;
      if (std::strncmp(encoding, "d5032fff", 8) == 0)
        marker.back() = true;
    }
  }
  for (size_t id = 0; id < translations.size(); ++id) {
    if (translations[id].empty())
      continue;
    std::printf("tb %zx", id);
    for (uint64_t pc : translations[id])
      std::printf(" %" PRIx64, pc);
    std::printf("\n");
  }
  for (size_t phase = 0; phase < phases.size(); ++phase) {
    std::printf("phase %zx\n", phase);
    for (const auto &[id, count] : phases[phase])
      std::printf("%zx %" PRIx64 "\n", id, count);
  }
  return 0;
}
