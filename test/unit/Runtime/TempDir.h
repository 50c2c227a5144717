//===- TempDir.h - a scratch directory removed at scope exit ----*- C++ -*-===//

#ifndef CQ4P_TEST_UNIT_RUNTIME_TEMPDIR_H
#define CQ4P_TEST_UNIT_RUNTIME_TEMPDIR_H

#include <cstdlib>
#include <dirent.h>
#include <string>
#include <unistd.h>

namespace cq4p::test {

class TempDir {
public:
  TempDir() {
    const char *base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cq4p-test-XXXXXX";
    path_ = pattern;
    if (!::mkdtemp(path_.data()))
      path_.clear();
  }
  ~TempDir() {
    if (path_.empty())
      return;
    if (DIR *dir = ::opendir(path_.c_str())) {
      while (dirent *entry = ::readdir(dir)) {
        std::string name = entry->d_name;
        if (name != "." && name != "..")
          ::unlink((path_ + "/" + name).c_str());
      }
      ::closedir(dir);
    }
    ::rmdir(path_.c_str());
  }
  const std::string &path() const { return path_; }
  std::string file(const std::string &name) const { return path_ + "/" + name; }

private:
  std::string path_;
};

} // namespace cq4p::test

#endif // CQ4P_TEST_UNIT_RUNTIME_TEMPDIR_H
