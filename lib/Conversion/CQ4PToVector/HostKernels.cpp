//===- HostKernels.cpp - the x86 panel dot on 256- and 512-bit vectors ----===//
//
// cq4p.panel_dot for x86 with AVX2 or wider: the pair-zip loop of
// KernelLowering.cpp on ymm or zmm registers. A W-byte load of a kg-block
// holds W/2 channels; the 16-bit unpacks of kg-blocks t and t+1 work per
// 128-bit lane, so each lane of the zipped vectors is exactly the 128-bit
// pair-zip of one 8-channel slice, and `pshufb` (also per lane) looks the
// nibbles up in the codebook replicated to every lane. Accumulator lane
// 4l+i of (chunk, half) therefore holds channel 8*(chunk*W/16 + l) + 4*half
// + i; two shuffles per chunk restore channel order when the partials are
// stored, once per group.
//
// The activations of the tile's rows for the group are rearranged into a
// stack buffer of 32-bit words (the even and the odd bytes of each 8
// activations, the two operands of a zipped vector's dots), so that every
// activation operand in the loop is a broadcast load from memory, not a
// shuffle. The buffer holds every group's for the kernel call, tagged with
// the tile's row and the activations' address, so that a tile rearranges
// its rows once for a block of super-blocks (a GEMV once for all of them)
// rather than once per super-block: at 4 rows and K = 2048 that work was a
// seventh of the GEMM's instructions.
//
// The 4-way dot, exact in int32 like the generic one:
//   - VNNI (AVX-512 VNNI on zmm, AVX-VNNI on ymm): `vpdpbusd` multiplies
//     unsigned by signed bytes. The codebook is biased instead of the
//     activations: the looked-up weight is w + 128 (table xor 0x80), so
//     each dot adds 128 * (sum of the activations) too, the same amount for
//     every channel of a row; the accumulators start at -128 * that sum,
//     computed once per row and group. One instruction per dot, no
//     per-weight-vector correction.
//   - AVX2: `pmaddubsw(|a|, sign(w, a))` then `pmaddwd` by ones: |a| <= 128
//     and |w| <= 127, so the pair sums (at most 32512) never saturate.
//
// GEMM tiles take as many channels per pass as the register file holds
// accumulators for: all 64 channels on zmm up to 4 rows (16 accumulators
// of 32), half of them up to 8 rows; on the 16 ymm registers, 8
// accumulators.
//
// Why 4-row tiles on zmm (AMD EPYC, Zen 5, one thread, GEMMs of a 1.1 B
// model's shapes at 128 rows, interleaved runs): the loop over a group's
// kg-blocks runs at the VPDPBUSD's peak (276 instructions per 128 dots,
// the mix cq4p-bench-compute-probe times at 98-100% of the bare dot), and
// a GEMM call reaches 66-80% of that peak; what it loses is at the group's
// end, where the partials leave the registers for the fp32 rescale (float,
// two multiplies and an add per 16 channels and row, in the contract's
// order: about a tenth of the time) and the weights come from L2 (loads
// from one L1-resident group were 6-10% faster). Tiles that decode fewer
// weights per dot measured slower: 8 rows by 32 channels (251 instructions
// per 128 dots, each row's activation word broadcast once for its two
// dots) 1-14%, 16 rows by 16 channels (163, the words as broadcast memory
// operands) 9-27%; so did zips in channel order by VPERMT2W (no shuffle
// of the partials: 3-4%) and a fully unrolled group (1-15%); wider blocks
// of super-blocks (1-2 MiB: 0-4% slower) and prefetches of the panels'
// lines 1-4 KiB ahead (0-2% faster) were within the runs' noise.
//
//===----------------------------------------------------------------------===//

#include "HostKernels.h"
#include "KernelLowering/LoweringHelpers.h"

#include "cq4p/Dialect/CQ4P/IR/CQ4P.h"
#include "cq4p/Dialect/CQ4PIntr/IR/CQ4PIntr.h"
#include "cq4p/format.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::cq4p;

namespace {

/// How far ahead of the GEMV's loads its panels are prefetched (a page),
/// into every cache level (a non-temporal hint measured at half the
/// bandwidth on Intel: bench/host/run, section "GEMV from DRAM").
constexpr int64_t kPrefetchBytes = 4096;
constexpr int32_t kPrefetchLocality = 3;

/// Whether the one-row panel dot prefetches: false on an AMD (or Hygon)
/// CPU. On AMD's Zen 4 every software prefetch tried slowed the GEMV's
/// stream from DRAM down: 65-73% of the read probe with these hints (a hint
/// per line, 4 KiB ahead), 88-95% without; a hint per KiB, 1 KiB ahead,
/// 65-75%; into L2 alone, 8 KiB ahead, no better than none. On Intel they
/// carried the stream across the 4 KiB pages where its hardware prefetchers
/// stop: 66-77% without, 80-106% with. The answer is the module's flag
/// (kHostPrefetchFlag): 0 until the first panel dot of the process reads
/// CPUID's vendor (EBX holds its first four bytes: "Auth"enticAMD,
/// "Hygo"nGenuine) and stores 1 (prefetch) or 2 (not), with relaxed atomic
/// accesses since threads may race to store the same value. Kernels load no
/// code at the library's load (the runtime refuses load constructors), so
/// the first call decides.
Value hostPrefetching(OpBuilder &b, Location loc) {
  MLIRContext *context = b.getContext();
  Type i8 = b.getI8Type(), i32 = b.getI32Type();
  auto flagType = MemRefType::get({}, i8);
  Value address = memref::ExtractAlignedPointerAsIndexOp::create(
      b, loc, memref::GetGlobalOp::create(b, loc, flagType, kHostPrefetchFlag));
  Value pointer = LLVM::IntToPtrOp::create(
      b, loc, LLVM::LLVMPointerType::get(context),
      arith::IndexCastOp::create(b, loc, b.getI64Type(), address).getResult());
  auto constant8 = [&](int64_t value) -> Value {
    return arith::ConstantOp::create(b, loc, b.getI8IntegerAttr(value));
  };
  auto constant32 = [&](int64_t value) -> Value {
    return arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(value));
  };
  Value state = LLVM::LoadOp::create(b, loc, i8, pointer, /*alignment=*/1,
                                     /*isVolatile=*/false, /*isNonTemporal=*/false,
                                     /*isInvariant=*/false,
                                     /*isInvariantGroup=*/false,
                                     LLVM::AtomicOrdering::monotonic);
  Value known =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ne, state, constant8(0));
  auto resolve = scf::IfOp::create(b, loc, TypeRange{i8}, known,
                                   /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(resolve.thenBlock());
    scf::YieldOp::create(b, loc, state);
    b.setInsertionPointToStart(resolve.elseBlock());
    Value ebx = cq4p_intr::X86CpuidVendorOp::create(b, loc, i32);
    auto vendorIs = [&](int64_t firstFourBytes) -> Value {
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, ebx,
                                   constant32(firstFourBytes));
    };
    Value amd = arith::OrIOp::create(b, loc, vendorIs(0x68747541),
                                     vendorIs(0x6f677948));
    Value decided =
        arith::SelectOp::create(b, loc, amd, constant8(2), constant8(1));
    LLVM::StoreOp::create(b, loc, decided, pointer, /*alignment=*/1,
                          /*isVolatile=*/false, /*isNonTemporal=*/false,
                          /*isInvariantGroup=*/false,
                          LLVM::AtomicOrdering::monotonic);
    scf::YieldOp::create(b, loc, decided);
  }
  return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq,
                               resolve.getResult(0), constant8(1));
}

} // namespace

bool mlir::cq4p::isWideX86Dot(X86Dot dot) {
  return dot == X86Dot::avx2 || dot == X86Dot::avxvnni ||
         dot == X86Dot::avx512vnni;
}

LogicalResult mlir::cq4p::lowerWideX86PanelDot(PanelDotOp op,
                                                PatternRewriter &rewriter,
                                                X86Dot dot) {
  Location loc = op.getLoc();
  OpBuilder &b = rewriter;
  auto panelsType = cast<MemRefType>(op.getPanels().getType());
  int64_t kgPerGroup = panelsType.getDimSize(2);
  int64_t gs = kgPerGroup * CQ4P_KG_BLOCK_K;
  if (gs % 32 != 0)
    return rewriter.notifyMatchFailure(
        op, "panel groups must be a multiple of 32 K values");
  int64_t rows = cast<MemRefType>(op.getPartials().getType()).getDimSize(0);
  bool vnni = dot != X86Dot::avx2;
  int64_t width = dot == X86Dot::avx512vnni ? 64 : 32; // bytes
  int64_t lanes = width / 16;                                     // 128-bit
  int64_t chunks = CQ4P_KG_BLOCK_BYTES / width; // loads per kg-block
  int64_t accBudget = (width == 64 ? 32 : 16) / 2;
  int64_t chunksPerPass = chunks;
  while (chunksPerPass > 1 && rows * 2 * chunksPerPass > accBudget)
    chunksPerPass /= 2;
  int64_t passes = chunks / chunksPerPass;
  int64_t words = gs / 4; // 32-bit words of rearranged activations per row

  auto i8v = VectorType::get({width}, b.getI8Type());
  auto i16v = VectorType::get({width / 2}, b.getI16Type());
  auto i32v = VectorType::get({width / 4}, b.getI32Type());
  auto i8x16 = VectorType::get({16}, b.getI8Type());
  auto i32x4 = VectorType::get({4}, b.getI32Type());
  auto i32x16 = VectorType::get({16}, b.getI32Type());
  // Per 128-bit lane byte lookup (VPSHUFB) and the VNNI dot (VPDPBUSD) at
  // the register width.
  auto pshufb = [&](Value table, Value index) -> Value {
    if (width == 64)
      return cq4p_intr::X86Avx512PshufB512Op::create(b, loc, i8v, table, index);
    return cq4p_intr::X86Avx2PshufBOp::create(b, loc, i8v, table, index);
  };
  auto vpdpbusd = [&](Value acc, Value unsignedBytes, Value signedBytes) -> Value {
    if (width == 64)
      return cq4p_intr::X86Avx512Vpdpbusd512Op::create(b, loc, i32v, acc,
                                                         unsignedBytes, signedBytes);
    return cq4p_intr::X86Avx512Vpdpbusd256Op::create(b, loc, i32v, acc,
                                                       unsignedBytes, signedBytes);
  };

  Value c0 = cIndex(b, loc, 0), c1 = cIndex(b, loc, 1);
  Value sb = op.getSuperBlock(), g = op.getGroup(), row = op.getRow();
  Value groupBase = arith::MulIOp::create(b, loc, g, cIndex(b, loc, gs));

  // The codebook in every 128-bit lane (biased by 128 for VNNI).
  Value table = vector::LoadOp::create(b, loc, i8x16, op.getCbI8(), c0);
  if (vnni)
    table = arith::XOrIOp::create(b, loc, table,
                                  splat(b, loc, i8x16, b.getI8IntegerAttr(-128)));
  SmallVector<int64_t> replicate;
  for (int64_t i = 0; i < width; ++i)
    replicate.push_back(i % 16);
  table = vector::ShuffleOp::create(b, loc, table, table, replicate);

  // The rows' activations rearranged: per 32 activations, the even bytes
  // then the odd bytes; for AVX2 their absolute values too. For VNNI the
  // accumulators' start, -128 * the row's sum over the group. Kept per
  // group for the call, tagged with the tile's first row and the
  // activations' address: the next super-block of the same tile (GEMM
  // tiles visit a block of super-blocks in turn, TileSuperBlocks.cpp; a
  // GEMV's one row visits them all) finds them ready.
  int64_t ng = panelsType.getDimSize(1);
  auto prepType = MemRefType::get({ng, rows, words}, b.getI32Type());
  Value prep = entryAlloca(b, op, prepType);
  Value absPrep = vnni ? Value() : entryAlloca(b, op, prepType);
  Value biases = vnni ? entryAlloca(b, op, MemRefType::get({ng, rows}, b.getI32Type()))
                      : Value();
  // The tags, (row, address) per group; no tile starts at row -1.
  Value tags = entryAlloca(b, op, MemRefType::get({ng, 2}, b.getIndexType()));
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointAfter(tags.getDefiningOp());
    Value none = cIndex(b, loc, -1);
    for (int64_t group = 0; group < ng; ++group)
      memref::StoreOp::create(b, loc, none, tags,
                              ValueRange{cIndex(b, loc, group), cIndex(b, loc, 0)});
  }
  Value address = arith::AddIOp::create(
      b, loc, memref::ExtractAlignedPointerAsIndexOp::create(b, loc, op.getAct()),
      memref::ExtractStridedMetadataOp::create(b, loc, op.getAct()).getOffset());
  Value rowTag = memref::LoadOp::create(b, loc, tags, ValueRange{g, c0});
  Value addressTag = memref::LoadOp::create(b, loc, tags, ValueRange{g, c1});
  Value ready = arith::AndIOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, rowTag, row),
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, addressTag, address));
  SmallVector<int64_t> evenMask, oddMask;
  for (int64_t i = 0; i < 16; ++i) {
    evenMask.push_back(2 * i);
    oddMask.push_back(2 * i + 1);
  }
  auto prepare = scf::IfOp::create(b, loc, ready, /*withElseRegion=*/true);
  {
    OpBuilder::InsertionGuard prepareGuard(b);
    b.setInsertionPointToStart(prepare.elseBlock());
    // VNNI's accumulators start at -128 * the row's sum over the group.
    auto storeBias = [&](Value sums, Value rIndex) {
      Value sum = vector::ReductionOp::create(b, loc, vector::CombiningKind::ADD, sums);
      Value bias = arith::MulIOp::create(
          b, loc, sum, arith::ConstantOp::create(b, loc, b.getI32IntegerAttr(-128)));
      memref::StoreOp::create(b, loc, bias, biases, ValueRange{g, rIndex});
    };
    // With VNNI, `width` activations a step: one byte shuffle puts each
    // 32's even bytes before its odd ones (VPSHUFB then VPERMQ, or VPERMB),
    // and one VPDPBUSD by bytes of 1 adds them four at a time for the sum:
    // five instructions a step where the general loop below takes a dozen
    // per 32 activations: 98 instructions a group of a 4-row zmm tile against
    // 176 (at K = 8192, where a block holds two super-blocks and a tile
    // prepares each group once for the two, about 4% of the tile's
    // instructions against 6%).
    SmallVector<int64_t> evensThenOdds;
    for (int64_t block = 0; block < width / 32; ++block)
      for (int64_t parity = 0; parity < 2; ++parity)
        for (int64_t i = 0; i < 16; ++i)
          evensThenOdds.push_back(32 * block + 2 * i + parity);
    auto prepareVnniRow = [&](int64_t r) {
      Value actRow = arith::AddIOp::create(b, loc, row, cIndex(b, loc, r));
      Value rIndex = cIndex(b, loc, r);
      Value ones = splat(b, loc, i8v, b.getI8IntegerAttr(1));
      auto loop = scf::ForOp::create(
          b, loc, c0, cIndex(b, loc, gs / width), c1,
          ValueRange{splat(b, loc, i32v, b.getI32IntegerAttr(0))});
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value it = loop.getInductionVar();
        Value k = arith::AddIOp::create(
            b, loc, groupBase, arith::MulIOp::create(b, loc, it, cIndex(b, loc, width)));
        Value bytes = vector::LoadOp::create(b, loc, i8v, op.getAct(),
                                             ValueRange{actRow, k});
        Value split = vector::ShuffleOp::create(b, loc, bytes, bytes, evensThenOdds);
        Value word = arith::MulIOp::create(b, loc, it, cIndex(b, loc, width / 4));
        vector::StoreOp::create(b, loc,
                                vector::BitCastOp::create(b, loc, i32v, split),
                                prep, ValueRange{g, rIndex, word});
        scf::YieldOp::create(b, loc,
                             vpdpbusd(loop.getRegionIterArgs()[0], ones, bytes));
      }
      storeBias(loop.getResult(0), rIndex);
    };
    // Otherwise per 32 activations: the even and the odd 16 bytes, for AVX2
    // their absolute values too, for VNNI (groups not a whole number of
    // registers) the sum by sign extension.
    auto prepareRow = [&](int64_t r) {
      Value actRow = arith::AddIOp::create(b, loc, row, cIndex(b, loc, r));
      Value rIndex = cIndex(b, loc, r);
      SmallVector<Value> sumInit;
      if (vnni)
        sumInit.push_back(splat(b, loc, i32x16, b.getI32IntegerAttr(0)));
      auto loop = scf::ForOp::create(b, loc, c0, cIndex(b, loc, gs / 32), c1,
                                     sumInit);
      {
        OpBuilder::InsertionGuard guard(b);
        b.setInsertionPointToStart(loop.getBody());
        Value it = loop.getInductionVar();
        Value k = arith::AddIOp::create(
            b, loc, groupBase, arith::MulIOp::create(b, loc, it, cIndex(b, loc, 32)));
        Value kNext = arith::AddIOp::create(b, loc, k, cIndex(b, loc, 16));
        Value lo = vector::LoadOp::create(b, loc, i8x16, op.getAct(),
                                          ValueRange{actRow, k});
        Value hi = vector::LoadOp::create(b, loc, i8x16, op.getAct(),
                                          ValueRange{actRow, kNext});
        Value word = arith::MulIOp::create(b, loc, it, cIndex(b, loc, 8));
        Value oddWord = arith::AddIOp::create(b, loc, word, cIndex(b, loc, 4));
        Value evens = vector::ShuffleOp::create(b, loc, lo, hi, evenMask);
        Value odds = vector::ShuffleOp::create(b, loc, lo, hi, oddMask);
        auto store = [&](Value buffer, Value bytes, Value at) {
          vector::StoreOp::create(b, loc,
                                  vector::BitCastOp::create(b, loc, i32x4, bytes),
                                  buffer, ValueRange{g, rIndex, at});
        };
        store(prep, evens, word);
        store(prep, odds, oddWord);
        if (!vnni) {
          store(absPrep, math::AbsIOp::create(b, loc, evens), word);
          store(absPrep, math::AbsIOp::create(b, loc, odds), oddWord);
        } else {
          Value sum = arith::AddIOp::create(
              b, loc, loop.getRegionIterArgs()[0],
              arith::AddIOp::create(b, loc,
                                    arith::ExtSIOp::create(b, loc, i32x16, lo),
                                    arith::ExtSIOp::create(b, loc, i32x16, hi)));
          scf::YieldOp::create(b, loc, sum);
        }
      }
      if (vnni)
        storeBias(loop.getResult(0), rIndex);
    };
    bool vnniSteps = vnni && gs % width == 0;
    for (int64_t r = 0; r < rows; ++r) {
      if (vnniSteps)
        prepareVnniRow(r);
      else
        prepareRow(r);
    }
    memref::StoreOp::create(b, loc, row, tags, ValueRange{g, c0});
    memref::StoreOp::create(b, loc, address, tags, ValueRange{g, c1});
  }
  SmallVector<Value> accStart;
  for (int64_t r = 0; r < rows; ++r) {
    Value start = splat(b, loc, i32v, b.getI32IntegerAttr(0));
    if (vnni)
      start = vector::BroadcastOp::create(
          b, loc, i32v,
          memref::LoadOp::create(b, loc, biases, ValueRange{g, cIndex(b, loc, r)}));
    accStart.push_back(start);
  }

  Value lowMask = splat(b, loc, i8v, b.getI8IntegerAttr(0x0F));
  Value four = splat(b, loc, i8v, b.getI8IntegerAttr(4));
  Value ones16 = splat(b, loc, i16v, b.getI16IntegerAttr(1));
  // The unpacks of 16-bit elements within each 128-bit lane.
  SmallVector<int64_t> unpackLow, unpackHigh;
  for (int64_t l = 0; l < lanes; ++l)
    for (int64_t i = 0; i < 4; ++i) {
      unpackLow.append({8 * l + i, width / 2 + 8 * l + i});
      unpackHigh.append({8 * l + 4 + i, width / 2 + 8 * l + 4 + i});
    }
  auto broadcastWord = [&](Value buffer, int64_t r, Value word) -> Value {
    Value value = memref::LoadOp::create(b, loc, buffer,
                                         ValueRange{g, cIndex(b, loc, r), word});
    return vector::BitCastOp::create(
        b, loc, i8v, vector::BroadcastOp::create(b, loc, i32v, value));
  };

  // A GEMV streams its panels once: the lines kPrefetchBytes ahead of each
  // step are prefetched (one hint per 64-byte line), so the stream keeps
  // running across the 4 KiB pages where the hardware prefetchers stop. The
  // step's 1 KiB ahead is clamped to the tensor's last 1 KiB once, its 16
  // lines at constant offsets from there.
  //
  // Where the module declares the prefetch flag (DeclareHostPrefetchFlag),
  // the hints run only on CPUs not made by AMD (hostPrefetching says why).
  constexpr int64_t kStepBytes = 8 * CQ4P_KG_BLOCK_BYTES;
  Value flatPanels, lastStep, prefetching;
  if (rows == 1) {
    int64_t total = panelsType.getNumElements();
    flatPanels = memref::CollapseShapeOp::create(
        b, loc, op.getPanels(),
        ArrayRef<ReassociationIndices>{ReassociationIndices{0, 1, 2, 3}});
    lastStep = cIndex(b, loc, std::max<int64_t>(0, total - kStepBytes));
    auto module = op->getParentOfType<ModuleOp>();
    if (module && SymbolTable::lookupSymbolIn(module, kHostPrefetchFlag))
      prefetching = hostPrefetching(b, loc);
  }
  auto emitPass = [&](Value pass) {
    int64_t accsPerRow = 2 * chunksPerPass;
    SmallVector<Value> inits;
    for (int64_t r = 0; r < rows; ++r)
      inits.append(accsPerRow, accStart[r]);
    auto kLoop = scf::ForOp::create(b, loc, c0, cIndex(b, loc, gs / 32), c1,
                                    inits);
    {
      OpBuilder::InsertionGuard guard(b);
      b.setInsertionPointToStart(kLoop.getBody());
      Value it = kLoop.getInductionVar();
      SmallVector<Value> accs(kLoop.getRegionIterArgs().begin(),
                              kLoop.getRegionIterArgs().end());
      // 8 kg-blocks and 8 words of rearranged activations per step.
      Value wordBase = arith::MulIOp::create(b, loc, it, cIndex(b, loc, 8));
      Value kgBase = wordBase;
      if (flatPanels) {
        OpBuilder::InsertionGuard prefetchGuard(b);
        if (prefetching)
          b.setInsertionPointToStart(
              scf::IfOp::create(b, loc, prefetching, /*withElseRegion=*/false)
                  .thenBlock());
        Value block = arith::AddIOp::create(
            b, loc,
            arith::MulIOp::create(
                b, loc,
                arith::AddIOp::create(
                    b, loc,
                    arith::MulIOp::create(
                        b, loc, sb, cIndex(b, loc, panelsType.getDimSize(1))),
                    g),
                cIndex(b, loc, kgPerGroup)),
            kgBase);
        Value ahead = arith::MinUIOp::create(
            b, loc,
            arith::AddIOp::create(
                b, loc,
                arith::MulIOp::create(b, loc, block,
                                      cIndex(b, loc, CQ4P_KG_BLOCK_BYTES)),
                cIndex(b, loc, kPrefetchBytes)),
            lastStep);
        for (int64_t line = 0; line < kStepBytes; line += 64)
          memref::PrefetchOp::create(
              b, loc, flatPanels,
              ValueRange{arith::AddIOp::create(b, loc, ahead, cIndex(b, loc, line))},
              /*isWrite=*/false, /*localityHint=*/kPrefetchLocality,
              /*isDataCache=*/true);
      }
      for (int64_t p = 0; p < 4; ++p) {
        Value evenWord = arith::AddIOp::create(b, loc, wordBase, cIndex(b, loc, p));
        Value oddWord = arith::AddIOp::create(b, loc, wordBase, cIndex(b, loc, 4 + p));
        SmallVector<Value> even, odd, absEven, absOdd;
        for (int64_t r = 0; r < rows; ++r) {
          even.push_back(broadcastWord(prep, r, evenWord));
          odd.push_back(broadcastWord(prep, r, oddWord));
          if (!vnni) {
            absEven.push_back(broadcastWord(absPrep, r, evenWord));
            absOdd.push_back(broadcastWord(absPrep, r, oddWord));
          }
        }
        auto dot = [&](Value acc, Value weights, int64_t r, bool high) -> Value {
          Value act = high ? odd[r] : even[r];
          if (vnni)
            return vpdpbusd(acc, weights, act);
          Value signedWeights =
              cq4p_intr::X86Avx2PsignBOp::create(b, loc, i8v, weights, act);
          Value pairs = cq4p_intr::X86Avx2PmaddUbSwOp::create(
              b, loc, i16v, high ? absOdd[r] : absEven[r], signedWeights);
          Value quads =
              cq4p_intr::X86Avx2PmaddWdOp::create(b, loc, i32v, pairs, ones16);
          return arith::AddIOp::create(b, loc, acc, quads);
        };
        Value kgA = arith::AddIOp::create(b, loc, kgBase, cIndex(b, loc, 2 * p));
        Value kgB = arith::AddIOp::create(b, loc, kgA, c1);
        for (int64_t cc = 0; cc < chunksPerPass; ++cc) {
          Value byte = arith::AddIOp::create(
              b, loc,
              arith::MulIOp::create(b, loc, pass, cIndex(b, loc, chunksPerPass * width)),
              cIndex(b, loc, cc * width));
          Value blockA = vector::BitCastOp::create(
              b, loc, i16v,
              vector::LoadOp::create(b, loc, i8v, op.getPanels(),
                                     ValueRange{sb, g, kgA, byte}));
          Value blockB = vector::BitCastOp::create(
              b, loc, i16v,
              vector::LoadOp::create(b, loc, i8v, op.getPanels(),
                                     ValueRange{sb, g, kgB, byte}));
          for (int64_t half = 0; half < 2; ++half) {
            Value zipped = vector::BitCastOp::create(
                b, loc, i8v,
                vector::ShuffleOp::create(b, loc, blockA, blockB,
                                          half ? unpackHigh : unpackLow));
            Value low = arith::AndIOp::create(b, loc, zipped, lowMask);
            Value high = arith::ShRUIOp::create(b, loc, zipped, four);
            Value wLow = pshufb(table, low);
            Value wHigh = pshufb(table, high);
            for (int64_t r = 0; r < rows; ++r) {
              Value &acc = accs[r * accsPerRow + 2 * cc + half];
              acc = dot(acc, wLow, r, false);
              acc = dot(acc, wHigh, r, true);
            }
          }
        }
      }
      scf::YieldOp::create(b, loc, accs);
    }
    // The partials in channel order: chunk cc's low and high accumulators
    // interleaved by 4 lanes.
    SmallVector<int64_t> orderFirst, orderSecond;
    for (int64_t j = 0; j < width / 2; ++j) {
      int64_t lane = j / 8, within = j % 8;
      int64_t source = (within / 4) * (width / 4) + 4 * lane + within % 4;
      (j < width / 4 ? orderFirst : orderSecond).push_back(source);
    }
    Value passChannels = arith::MulIOp::create(
        b, loc, pass, cIndex(b, loc, chunksPerPass * width / 2));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t cc = 0; cc < chunksPerPass; ++cc) {
        Value lowAcc = kLoop.getResult(r * 2 * chunksPerPass + 2 * cc);
        Value highAcc = kLoop.getResult(r * 2 * chunksPerPass + 2 * cc + 1);
        Value channel = arith::AddIOp::create(b, loc, passChannels,
                                              cIndex(b, loc, cc * width / 2));
        for (int64_t part = 0; part < 2; ++part) {
          Value ordered = vector::ShuffleOp::create(
              b, loc, lowAcc, highAcc, part ? orderSecond : orderFirst);
          Value at = arith::AddIOp::create(b, loc, channel,
                                           cIndex(b, loc, part * width / 4));
          vector::StoreOp::create(b, loc, ordered, op.getPartials(),
                                  ValueRange{cIndex(b, loc, r), at});
        }
      }
  };

  if (passes == 1) {
    emitPass(c0);
  } else {
    auto passLoop = scf::ForOp::create(b, loc, c0, cIndex(b, loc, passes), c1);
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(passLoop.getBody());
    emitPass(passLoop.getInductionVar());
  }
  rewriter.eraseOp(op);
  return success();
}
