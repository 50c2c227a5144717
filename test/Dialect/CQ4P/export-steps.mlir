// RUN: cq4p-opt %s -cq4p-export-steps="target=aarch64-neon features=1" | FileCheck %s

// Each dispatch becomes a task (args, begin, end) computing its entry's
// pointers from its places and its integers from its scalars; each step a
// function handing the tasks to the runtime's parallel-for; then the
// cq4p_model_steps descriptor.

module attributes {cq4p.model = {architecture = "llama", digest = "abc", vocab = 256 : i64, hidden = 128 : i64, layers = 1 : i64},
                   cq4p.model_plan = #cq4p.model_plan<prefill_chunk = 8, kv_dtype = f16, workspace_bytes = 4096,
                                      kv_position_bytes = 512, kv_width = 64, state_bytes = 0,
                                      bindings = ["w": cq4<64x128, gs = 128>]>} {
  llvm.func @gemv(!llvm.ptr, !llvm.ptr, !llvm.ptr, !llvm.ptr, i64, i64, i64)
  llvm.func @rope(!llvm.ptr, !llvm.ptr, i64, i64)
  llvm.func @rows_kernel(!llvm.ptr, i64)

  cq4p.step @decode attributes {max_rows = 1 : i64} {
    cq4p.dispatch @gemv <range> work [0, 8]
        pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace>,
                  #cq4p.place<workspace, offset = 1024, row_bytes = 128>,
                  #cq4p.place<workspace, offset = 2048, last_row, row_bytes = 4>]
        scalars [rows, begin, end] {single_row}
  }
  cq4p.step @prefill attributes {max_rows = 8 : i64, single_row = @decode} {
    cq4p.dispatch @rope <rows> work [1, 0]
        pointers [#cq4p.place<workspace, row_bytes = 256>,
                  #cq4p.place<keys, index = 0, cache_offset = 256, row_bytes = 128, at_position>]
        scalars [rows, position]
    cq4p.dispatch @rows_kernel <rows> work [1, 0]
        pointers [#cq4p.place<workspace, row_bytes = 512>] scalars [rows] {grain = 4 : i64}
    cq4p.dispatch @gemv <range> work [0, 6]
        pointers [#cq4p.place<binding, index = 3>, #cq4p.place<workspace>,
                  #cq4p.place<workspace, offset = 1024, row_bytes = 128>,
                  #cq4p.place<workspace, offset = 2048, row_bytes = 4>]
        scalars [rows, begin, end] {grain = 4 : i64}
  }
}

// CHECK-NOT: cq4p.step
// CHECK-LABEL: llvm.func internal @__cq4p_task_decode_0(
// CHECK-SAME: %[[ARGS:.*]]: !llvm.ptr, %[[BEGIN:.*]]: i64, %[[END:.*]]: i64)
// CHECK: %[[ONE:.*]] = llvm.mlir.constant(1 : i64)
// The binding: bindings[3].
// CHECK: %[[TABLE_ADDR:.*]] = llvm.getelementptr %[[ARGS]][0, 0] : (!llvm.ptr) -> !llvm.ptr, !llvm.struct<"cq4p_step_args", (ptr, ptr, ptr, ptr, ptr, i64, i64, i64, ptr, ptr, ptr)>
// CHECK: %[[TABLE:.*]] = llvm.load %[[TABLE_ADDR]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[SLOT:.*]] = llvm.getelementptr %[[TABLE]][3]
// CHECK: llvm.load %[[SLOT]]
// The last row: rows - 1 rows ahead, 4 bytes each.
// CHECK: %[[ROWS_ADDR:.*]] = llvm.getelementptr %[[ARGS]][0, 5]
// CHECK: %[[ROWS:.*]] = llvm.load %[[ROWS_ADDR]] : !llvm.ptr -> i64
// CHECK: %[[LAST:.*]] = llvm.sub %[[ROWS]], %{{.*}}
// CHECK: llvm.add %{{.*}}, %[[LAST]]
// A single-row dispatch's rows are 1; a range split passes the range.
// CHECK: llvm.call @gemv(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[ONE]], %[[BEGIN]], %[[END]])

// CHECK-LABEL: llvm.func internal @cq4p_step_decode(
// CHECK: %[[FOR:.*]] = llvm.load %{{.*}} : !llvm.ptr -> !llvm.ptr
// CHECK: %[[TASK:.*]] = llvm.mlir.addressof @__cq4p_task_decode_0
// CHECK: llvm.call %[[FOR]](%{{.*}}, %[[TASK]], %{{.*}}, %{{.*}})

// CHECK-LABEL: llvm.func internal @__cq4p_task_prefill_0(
// CHECK-SAME: %[[ARGS:.*]]: !llvm.ptr, %[[BEGIN:.*]]: i64, %[[END:.*]]: i64)
// CHECK: %[[POS_ADDR:.*]] = llvm.getelementptr %[[ARGS]][0, 6]
// CHECK: %[[POS:.*]] = llvm.load %[[POS_ADDR]] : !llvm.ptr -> i64
// CHECK: %[[CTX_ADDR:.*]] = llvm.getelementptr %[[ARGS]][0, 7]
// CHECK: %[[CTX:.*]] = llvm.load %[[CTX_ADDR]] : !llvm.ptr -> i64
// The keys of layer 0: after 256 bytes per position of the cache.
// CHECK: %[[KV_ADDR:.*]] = llvm.getelementptr %[[ARGS]][0, 1]
// CHECK: %[[KV:.*]] = llvm.load %[[KV_ADDR]]
// CHECK: %[[C256:.*]] = llvm.mlir.constant(256 : i64)
// CHECK: %[[SKIP:.*]] = llvm.mul %[[CTX]], %[[C256]]
// CHECK: llvm.getelementptr %[[KV]][%[[SKIP]]]
// A rows split: the range's first row, plus the position for the cache.
// CHECK: llvm.add %[[BEGIN]], %[[POS]]
// CHECK: %[[COUNT:.*]] = llvm.sub %[[END]], %[[BEGIN]]
// CHECK: %[[AT:.*]] = llvm.add %[[POS]], %[[BEGIN]]
// CHECK: llvm.call @rope(%{{.*}}, %{{.*}}, %[[COUNT]], %[[AT]])

// A grain of 4 rows: the task's range is in blocks of 4, its end cut at the
// step's rows.
// CHECK-LABEL: llvm.func internal @__cq4p_task_prefill_1(
// CHECK-SAME: %[[ARGS:.*]]: !llvm.ptr, %[[BEGIN:.*]]: i64, %[[END:.*]]: i64)
// CHECK: %[[C4:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[FIRST:.*]] = llvm.mul %[[BEGIN]], %[[C4]]
// CHECK: %[[BLOCK_END:.*]] = llvm.mul %[[END]], %[[C4]]
// CHECK: %[[ROWS:.*]] = llvm.load %{{.*}} : !llvm.ptr -> i64
// CHECK: %[[PAST:.*]] = llvm.icmp "sgt" %[[BLOCK_END]], %{{.*}}
// CHECK: %[[LAST:.*]] = llvm.select %[[PAST]], %{{.*}}, %[[BLOCK_END]]
// CHECK: %[[AHEAD:.*]] = llvm.mul %[[FIRST]], %{{.*}}
// CHECK: %[[COUNT:.*]] = llvm.sub %[[LAST]], %[[FIRST]]
// CHECK: llvm.call @rows_kernel(%{{.*}}, %[[COUNT]])

// A range split's grain: the kernel's begin and end are in work items, the
// last block cut at the count (6).
// CHECK-LABEL: llvm.func internal @__cq4p_task_prefill_2(
// CHECK-SAME: %[[ARGS:.*]]: !llvm.ptr, %[[BEGIN:.*]]: i64, %[[END:.*]]: i64)
// CHECK: %[[C4:.*]] = llvm.mlir.constant(4 : i64)
// CHECK: %[[FIRST:.*]] = llvm.mul %[[BEGIN]], %[[C4]]
// CHECK: %[[BLOCK_END:.*]] = llvm.mul %[[END]], %[[C4]]
// CHECK: %[[C6:.*]] = llvm.mlir.constant(6 : i64)
// CHECK: %[[PAST:.*]] = llvm.icmp "sgt" %[[BLOCK_END]], %[[C6]]
// CHECK: %[[LAST:.*]] = llvm.select %[[PAST]], %[[C6]], %[[BLOCK_END]]
// CHECK: llvm.call @gemv(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[FIRST]], %[[LAST]])

// One row runs the decode step.
// CHECK-LABEL: llvm.func internal @cq4p_step_prefill(
// CHECK: llvm.cond_br
// CHECK: llvm.call @cq4p_step_decode(
// CHECK: llvm.mlir.addressof @__cq4p_task_prefill_0
// The grain's dispatch hands out ceil(rows / 4) blocks.
// CHECK: %[[C3:.*]] = llvm.mlir.constant(3 : i64)
// CHECK: %[[UP:.*]] = llvm.add %{{.*}}, %[[C3]]
// CHECK: %[[BLOCKS:.*]] = llvm.udiv %[[UP]], %{{.*}}
// CHECK: %[[TASK1:.*]] = llvm.mlir.addressof @__cq4p_task_prefill_1
// CHECK: llvm.call %{{.*}}(%{{.*}}, %[[TASK1]], %{{.*}}, %[[BLOCKS]])
// Six items in blocks of 4: ceil(6 / 4) = 2 blocks.
// CHECK: %[[TASK2:.*]] = llvm.mlir.addressof @__cq4p_task_prefill_2
// CHECK: llvm.call %{{.*}}(%{{.*}}, %[[TASK2]], %{{.*}}, %{{.*}})

// The descriptor: the kv dtype (2, f16), the target (2, aarch64-neon) and
// the features (1).
// CHECK-LABEL: llvm.mlir.global external constant @cq4p_model_steps()
// CHECK-SAME: !llvm.struct<"cq4p_model_desc", (i32, i32, ptr, ptr, ptr, i64, i64, i64, i64, i32, i32, i64, i64, i64, ptr, ptr, i64, i64)>
// CHECK-DAG: llvm.mlir.constant(2 : i32) : i32
// CHECK-DAG: llvm.mlir.constant(1 : i64) : i64
