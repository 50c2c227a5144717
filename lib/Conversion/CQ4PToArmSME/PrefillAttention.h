//===- PrefillAttention.h - SME2 prefill attention's softmax ----*- C++ -*-===//
//
// The streaming-mode parts of SME2 prefill attention around its outer
// products: the softmax over a query tile's scores and the division of its
// output rows by their sums; PrefillAttention.cpp explains them.
//
//===----------------------------------------------------------------------===//

#ifndef CQ4P_LIB_CONVERSION_CQ4PTOARMSME_PREFILLATTENTION_H
#define CQ4P_LIB_CONVERSION_CQ4PTOARMSME_PREFILLATTENTION_H

#include "mlir/IR/Builders.h"

namespace mlir::cq4p {

/// A query tile's keys (index values): of [keyBegin, keyEnd), those every
/// row of the tile at p0 sees, [clean, cleanEnd), and the whole 16-key
/// tiles inside them, keys [fusedBegin, fusedEnd) (multiples of 16), whose
/// largest scores the scores' outer products fold as they leave ZA, so
/// that the softmax's first pass skips them.
struct PrefillKeys {
  Value clean, cleanEnd, fusedBegin, fusedEnd;
};
PrefillKeys prefillKeys(OpBuilder &b, Location loc, int64_t window, Value keyBegin,
                        Value keyEnd, Value p0);

/// At `b`'s insertion point (in a streaming leaf, SVL 512): the softmax of
/// a query tile's scores st[j][r] (key j, query row r at position p0 + r;
/// in base 2, the queries having been multiplied by scale log2(e)) over
/// keys [keyBegin, keyEnd), in place: st[j][r] becomes 2^(st[j][r] - m[r]),
/// 0 where row r does not see key j (causal mask, and the sliding window
/// when `window` > 0), m[r] the row's largest visible score; inverses[r] =
/// 1 / sum_j st[j][r]. `st` is a memref of rows of 16 fp32; `inverses` an
/// address of 16 fp32. `fusedMax` is the largest score per row of keys
/// [keys.fusedBegin, keys.fusedEnd) (-inf where that range is empty).
void emitPrefillSoftmax(OpBuilder &b, Location loc, int64_t window, Value st,
                        Value keyBegin, Value keyEnd, Value p0, const PrefillKeys &keys,
                        Value fusedMax, Value inverses);

/// out[i0 + r, colBase + d] = outTile[r][d] * inverses[r] for r < present
/// and d < dim: `outTile` an address of 16 rows of `dim` fp32, `inverses`
/// of 16 fp32, `out` a [?][width] fp32 memref.
void emitPrefillNormalize(OpBuilder &b, Location loc, int64_t dim, Value outTile,
                          Value inverses, Value out, Value i0, Value colBase,
                          Value present);

} // namespace mlir::cq4p

#endif // CQ4P_LIB_CONVERSION_CQ4PTOARMSME_PREFILLATTENTION_H
