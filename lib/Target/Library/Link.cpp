//===- Link.cpp - a library's objects linked by lld, in process -----------===//
//
// lld runs in process, through its library interface. It resets every
// command-line option of the process when it is done: whatever a caller
// needs of its own options is copied before a link.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Target/Library/Link.h"

#include "cq4p/Target/Library/Codegen.h"

#include "lld/Common/Driver.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/IR/BasicBlock.h"
#include "llvm/IR/Function.h"
#include "llvm/IR/Instructions.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/Object/ObjectFile.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <map>
#include <optional>
#include <set>
#include <utility>

LLD_HAS_DRIVER(elf)

using namespace mlir;
using namespace mlir::cq4p;

namespace {

llvm::Error message(const llvm::Twine &text) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), text);
}

/// Runs lld (in process) with `args` after "ld.lld"; `what` names the
/// output in the message. lld resets every command-line option of the
/// process when it is done.
llvm::Error runLinker(const std::vector<std::string> &args,
                      const std::string &what) {
  std::vector<const char *> argv = {"ld.lld"};
  for (const std::string &arg : args)
    argv.push_back(arg.c_str());
  std::string diagnostics;
  llvm::raw_string_ostream errors(diagnostics);
  lld::Result result =
      lld::lldMain(argv, llvm::outs(), errors, {{lld::Gnu, &lld::elf::link}});
  if (result.retCode != 0)
    return message("linking " + what + " failed:\n" + diagnostics);
  return llvm::Error::success();
}

/// The sonames of the C library and of the math library on `triple`'s
/// system (one library on musl), or none where cq4p-compile does not know
/// them (a library then names no dependency, as before).
std::optional<std::pair<std::string, std::string>>
systemLibraries(const llvm::Triple &given) {
  // "aarch64-linux-gnu" names its OS second: normalized, it is Linux.
  llvm::Triple triple(llvm::Triple::normalize(given.str()));
  if (!triple.isOSLinux() || triple.isAndroid())
    return std::nullopt;
  if (triple.isMusl())
    return std::make_pair(std::string("libc.so"), std::string("libc.so"));
  if (triple.isGNUEnvironment())
    return std::make_pair(std::string("libc.so.6"), std::string("libm.so.6"));
  return std::nullopt;
}

/// Whether the undefined symbol `name` is the C library's (LLVM's memory
/// builtins, the stack protector); any other is taken to be libm's, which
/// is safe either way: libm itself needs libc.
bool isCLibrarySymbol(llvm::StringRef name) {
  return name.starts_with("mem") || name.starts_with("str") ||
         name.starts_with("__stack_chk") || name == "abort" || name == "bzero";
}

/// The symbols `objects` reference and none of them defines.
llvm::Expected<std::vector<std::string>>
undefinedSymbols(const std::vector<std::string> &objects) {
  std::set<std::string> defined, referenced;
  for (const std::string &path : objects) {
    auto file = llvm::object::ObjectFile::createObjectFile(path);
    if (!file)
      return message("reading " + path + ": " +
                     llvm::toString(file.takeError()));
    for (const llvm::object::SymbolRef &symbol : file->getBinary()->symbols()) {
      llvm::Expected<uint32_t> flags = symbol.getFlags();
      llvm::Expected<llvm::StringRef> name = symbol.getName();
      if (!flags || !name) {
        llvm::consumeError(flags.takeError());
        llvm::consumeError(name.takeError());
        continue;
      }
      if (name->empty() || !(*flags & llvm::object::SymbolRef::SF_Global))
        continue;
      if (*flags & llvm::object::SymbolRef::SF_Undefined)
        referenced.insert(name->str());
      else
        defined.insert(name->str());
    }
  }
  std::vector<std::string> undefined;
  for (const std::string &name : referenced)
    if (!defined.count(name) &&
        !llvm::StringRef(name).starts_with("_GLOBAL_OFFSET_TABLE_"))
      undefined.push_back(name);
  return undefined;
}

/// Writes, into `directory`, a stand-in shared library per system library
/// the objects call into (libc for memcpy and memset, libm for any math
/// function a kernel calls; the kernels call none today),
/// with that library's soname and a definition of each symbol called:
/// linking against them records DT_NEEDED, so that the library loads where
/// libm is not already loaded globally, while no file of this machine's
/// (nor an SDK's) is needed. The paths go to `stubs`.
llvm::Error writeSystemLibraryStubs(const llvm::Triple &triple,
                                    llvm::TargetMachine &machine,
                                    const std::vector<std::string> &objects,
                                    llvm::StringRef directory,
                                    std::vector<std::string> &stubs,
                                    TemporaryFiles &temporaries) {
  std::optional<std::pair<std::string, std::string>> sonames =
      systemLibraries(triple);
  if (!sonames)
    return llvm::Error::success();
  llvm::Expected<std::vector<std::string>> undefined =
      undefinedSymbols(objects);
  if (!undefined)
    return undefined.takeError();
  std::map<std::string, std::vector<std::string>> bySoname;
  for (const std::string &name : *undefined)
    bySoname[isCLibrarySymbol(name) ? sonames->first : sonames->second]
        .push_back(name);
  for (const auto &[soname, symbols] : bySoname) {
    llvm::LLVMContext context;
    llvm::Module module(soname, context);
    module.setTargetTriple(triple);
    module.setDataLayout(machine.createDataLayout());
    auto *type = llvm::FunctionType::get(llvm::Type::getVoidTy(context), false);
    for (const std::string &name : symbols) {
      auto *function = llvm::Function::Create(
          type, llvm::GlobalValue::ExternalLinkage, name, module);
      llvm::ReturnInst::Create(context,
                               llvm::BasicBlock::Create(context, "", function));
    }
    llvm::SmallString<256> object(directory), library(directory);
    llvm::sys::path::append(object, soname + ".o");
    llvm::sys::path::append(library, soname);
    temporaries.add(std::string(object));
    if (llvm::Error error = emitObject(machine, module, std::string(object)))
      return error;
    temporaries.add(std::string(library));
    if (llvm::Error error =
            runLinker({"-shared", "-soname", soname, "-o", std::string(library),
                       std::string(object)},
                      std::string(library)))
      return error;
    stubs.push_back(std::string(library));
  }
  return llvm::Error::success();
}

} // namespace

llvm::Error mlir::cq4p::linkSharedLibrary(
    const std::vector<std::string> &objects, const std::string &output,
    const llvm::Triple &triple, llvm::TargetMachine &machine,
    TemporaryFiles &temporaries) {
  llvm::Expected<std::string> stubDirectory =
      temporaries.createDirectory("cq4p-link");
  if (!stubDirectory)
    return stubDirectory.takeError();
  std::vector<std::string> stubs;
  if (llvm::Error error = writeSystemLibraryStubs(
          triple, machine, objects, *stubDirectory, stubs, temporaries))
    return error;
  std::vector<std::string> args = {"-shared", "-o",           output,
                                   "-z",      "noexecstack",  "-z",
                                   "now",     "--gc-sections"};
  args.insert(args.end(), objects.begin(), objects.end());
  args.push_back("--as-needed");
  args.insert(args.end(), stubs.begin(), stubs.end());
  return runLinker(args, output);
}

llvm::Error mlir::cq4p::linkRelocatable(const std::vector<std::string> &objects,
                                        const std::string &output,
                                        TemporaryFiles &temporaries) {
  // lld cannot report a failed write (a device such as /dev/full ends in
  // "LLVM ERROR"), so it links into a temporary, copied to `output` here.
  llvm::Expected<std::string> linked =
      temporaries.createFile("cq4p-kernels-linked", "o");
  if (!linked)
    return linked.takeError();
  std::vector<std::string> args = {"-r", "-o", *linked};
  args.insert(args.end(), objects.begin(), objects.end());
  if (llvm::Error error = runLinker(args, output))
    return error;
  if (std::error_code error = llvm::sys::fs::copy_file(*linked, output))
    return message("cannot write " + output + ": " + error.message());
  return llvm::Error::success();
}
