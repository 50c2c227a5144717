//===- CorpusCheck.cpp - the malformed corpus through the reader ----------===//
//
// Reads DIR/EXPECTED.tsv (file name, tab, the field its defect is in), as
// python/cq4p's corpus generator writes it, and checks that the reader
// refuses every file naming that field. Built with AddressSanitizer and
// UBSan: the reader must stay inside its buffers on every one of them.
//
//===----------------------------------------------------------------------===//

#include "cq4p/runtime/TensorFile.h"

#include <cstdio>
#include <fstream>
#include <string>

using namespace cq4p::runtime;

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  std::string dir = argv[1];
  std::ifstream list(dir + "/EXPECTED.tsv");
  if (!list) {
    std::fprintf(stderr, "%s/EXPECTED.tsv: cannot open\n", dir.c_str());
    return 2;
  }
  int checked = 0, wrong = 0;
  std::string line;
  while (std::getline(list, line)) {
    size_t tab = line.find('\t');
    if (line.empty() || line[0] == '#' || tab == std::string::npos)
      continue;
    std::string name = line.substr(0, tab), field = line.substr(tab + 1);
    if (field == "field" || field == "expected_field")
      continue; // a header row
    std::string path = dir + "/" + name;
    std::unique_ptr<TensorFile> file;
    Status status = TensorFile::open(path, file);
    std::string prefix = path + ": " + field + ": ";
    ++checked;
    if (field == "valid") {
      if (!status) {
        ++wrong;
        std::printf("FAIL %s: expected valid, refused: %s\n", name.c_str(),
                    status.message().c_str());
      }
    } else if (status || status.message().rfind(prefix, 0) != 0) {
      ++wrong;
      std::printf("FAIL %s: expected a refusal at '%s', got: %s\n", name.c_str(),
                  field.c_str(), status ? "accepted" : status.message().c_str());
    }
  }
  std::printf("%d corpus files checked, %d wrong\n", checked, wrong);
  return checked == 0 || wrong != 0 ? 1 : 0;
}
