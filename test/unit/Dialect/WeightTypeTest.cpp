//===- WeightTypeTest.cpp - the weight type through the C++ API -----------===//
//
// What passes and tools build through the C++ API rather than from text: the
// weight type's derived sizes against the format's formulas written out
// plainly here, and the verifier's refusals through getChecked.
//
//===----------------------------------------------------------------------===//

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <string>

using namespace mlir;
using namespace mlir::cq4p;

namespace {

class WeightTypeTest : public ::testing::Test {
protected:
  WeightTypeTest() {
    context.loadDialect<CQ4PDialect, func::FuncDialect>();
  }

  /// Builds a weight type through getChecked, returning the null type and
  /// the diagnostic text on failure.
  WeightType build(int64_t n, int64_t k, int64_t gs, Rotation rotation,
                   Layout layout, std::string &diagnostic) {
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      diagnostic = diag.str();
      return success();
    });
    return WeightType::getChecked(UnknownLoc::get(&context), &context, n, k,
                                  gs, rotation, layout);
  }

  MLIRContext context;
};

TEST_F(WeightTypeTest, PanelSizesFollowTheFormat) {
  struct Case {
    int64_t n, k, gs;
  } cases[] = {{64, 256, 128}, {192, 512, 128}, {100, 256, 128},
               {256, 256, 256}, {1, 32, 32},    {262144, 1536, 128}};
  for (const Case &c : cases) {
    std::string diagnostic;
    WeightType type =
        build(c.n, c.k, c.gs, Rotation::hadamard, Layout::panels, diagnostic);
    ASSERT_TRUE(type) << diagnostic;
    int64_t superBlocks = 0;
    for (int64_t first = 0; first < c.n; first += 64)
      ++superBlocks;
    // [SB][num_groups][gs/4][128 bytes]
    int64_t bytes = superBlocks * (c.k / c.gs) * (c.gs / 4) * 128;
    EXPECT_EQ(type.getNumSuperBlocks(), superBlocks) << c.n;
    EXPECT_EQ(type.getNumGroups(), c.k / c.gs);
    EXPECT_EQ(type.getPanelDataBytes(), bytes) << c.n << "x" << c.k;
  }
}

TEST_F(WeightTypeTest, RefusalsNameTheNumbers) {
  std::string diagnostic;
  EXPECT_FALSE(build(64, 1000, 128, Rotation::hadamard, Layout::panels,
                     diagnostic));
  EXPECT_EQ(diagnostic,
            "expected K (1000) to be a multiple of the group size (128)");
  EXPECT_FALSE(build(64, 1536, 1536, Rotation::orthogonal, Layout::panels,
                     diagnostic));
  EXPECT_EQ(diagnostic, "expected the group size (1536) of an orthogonal "
                        "panel weight to be its virtual group of 128");
  EXPECT_FALSE(build(-5, 256, 128, Rotation::hadamard, Layout::panels,
                     diagnostic));
  EXPECT_EQ(diagnostic, "expected N (-5) to be in [1, 2147483647]");
}

TEST_F(WeightTypeTest, ParsedTypeEqualsBuiltType) {
  const char *source = R"mlir(
    func.func @f(%w: !cq4p.weight<512x1536, gs = 64, hadamard, interleaved4row>) {
      return
    }
  )mlir";
  OwningOpRef<ModuleOp> module = parseSourceString<ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  auto func = *module->getOps<func::FuncOp>().begin();
  Type parsed = func.getArgumentTypes()[0];
  std::string diagnostic;
  WeightType built = build(512, 1536, 64, Rotation::hadamard,
                           Layout::interleaved4row, diagnostic);
  EXPECT_EQ(parsed, built);
  EXPECT_EQ(built.getRotation(), Rotation::hadamard);
  EXPECT_EQ(built.getLayout(), Layout::interleaved4row);
}

} // namespace
