//===- sme_abi.S - SME ABI support routines for AArch64 Linux -------------===//
//
// The routines that compiler-generated SME code calls (AAPCS64, "SME support
// routines"). They carry the lazy-save scheme for ZA: a function with live ZA
// that calls a function without ZA state points TPIDR2_EL0 at a TPIDR2 block
//
//   +0  u64  za_save_buffer      (SVL x SVL bytes, allocated by the caller)
//   +8  u16  num_za_save_slices
//   +10      6 reserved bytes, zero
//
// and leaves ZA dormant. Whoever wants ZA next commits the save
// (__arm_tpidr2_save); on return the caller restores from the buffer
// (__arm_tpidr2_restore) if the save was committed (TPIDR2_EL0 is null).
//
// Each routine preserves every register but x16 and x17 (and its results),
// as the ABI requires; x12 is the only ZA slice index register used and is
// saved around its use. All are marked .variant_pcs so that a dynamic linker
// binds them eagerly instead of through a register-clobbering lazy stub.
//
//===----------------------------------------------------------------------===//

  .arch armv8.2-a+sve+sme
  .text

.macro begin_routine name
  .globl \name
  .type \name, %function
  .variant_pcs \name
  .p2align 2
\name:
  .cfi_startproc
.endm

.macro end_routine name
  .cfi_endproc
  .size \name, . - \name
.endm

// Stores (str) or loads (ldr) the first w17 horizontal ZA slices to or
// from the buffer at x16, one streaming vector each; x12, the only slice
// index register used, is preserved.
.macro za_slices op
  str x12, [sp, #-16]!
  .cfi_adjust_cfa_offset 16
  .cfi_rel_offset x12, 0
  mov w12, wzr
1:
  cmp w12, w17
  b.hs 2f
  \op za[w12, 0], [x16]
  addsvl x16, x16, #1
  add w12, w12, #1
  b 1b
2:
  ldr x12, [sp], #16
  .cfi_adjust_cfa_offset -16
  .cfi_restore x12
.endm

// Aborts from any mode: a corrupt TPIDR2 block must not be used.
  .p2align 2
  .type cq4p_sme_abi_abort, %function
cq4p_sme_abi_abort:
  .cfi_startproc
  smstop sm
  bl abort
  .cfi_endproc
  .size cq4p_sme_abi_abort, . - cq4p_sme_abi_abort

// u64 __arm_sme_state(void)
//   x0: bit 63 set when this thread may use SME; bits 0 and 1 are PSTATE.SM
//       and PSTATE.ZA. x1: TPIDR2_EL0 (0 without SME).
begin_routine __arm_sme_state
  adrp x16, cq4p_sme_abi_has_sme
  ldrb w16, [x16, :lo12:cq4p_sme_abi_has_sme]
  cbz w16, 1f
  mrs x0, SVCR
  and x0, x0, #3
  orr x0, x0, #0x8000000000000000
  mrs x1, TPIDR2_EL0
  ret
1:
  mov x0, xzr
  mov x1, xzr
  ret
end_routine __arm_sme_state

// void __arm_tpidr2_save(void)
//   Commits a pending lazy save: when TPIDR2_EL0 is not null, stores the
//   block's num_za_save_slices horizontal ZA slices to its buffer. Leaves
//   TPIDR2_EL0 and PSTATE.ZA as they are.
begin_routine __arm_tpidr2_save
  adrp x16, cq4p_sme_abi_has_sme
  ldrb w16, [x16, :lo12:cq4p_sme_abi_has_sme]
  cbz w16, 3f
  mrs x16, TPIDR2_EL0
  cbz x16, 3f
  ldr x17, [x16, #8]
  tst x17, #0xffffffffffff0000      // reserved bytes 10..15
  b.ne cq4p_sme_abi_abort
  ldr x16, [x16]                    // za_save_buffer
  za_slices str
3:
  ret
end_routine __arm_tpidr2_save

// void __arm_tpidr2_restore(const tpidr2_block *blk)
//   Reloads ZA from a committed lazy save. Called with PSTATE.ZA set and
//   TPIDR2_EL0 null; x0 points at the caller's TPIDR2 block.
begin_routine __arm_tpidr2_restore
  mrs x16, TPIDR2_EL0
  cbnz x16, cq4p_sme_abi_abort
  ldr x17, [x0, #8]
  tst x17, #0xffffffffffff0000
  b.ne cq4p_sme_abi_abort
  ldr x16, [x0]
  za_slices ldr
  ret
end_routine __arm_tpidr2_restore

// void __arm_za_disable(void)
//   Commits any pending lazy save, clears TPIDR2_EL0 and turns ZA off.
begin_routine __arm_za_disable
  adrp x16, cq4p_sme_abi_has_sme
  ldrb w16, [x16, :lo12:cq4p_sme_abi_has_sme]
  cbz w16, 1f
  stp x29, x30, [sp, #-16]!
  .cfi_adjust_cfa_offset 16
  .cfi_rel_offset x29, 0
  .cfi_rel_offset x30, 8
  mov x29, sp
  bl __arm_tpidr2_save
  msr TPIDR2_EL0, xzr
  smstop za
  ldp x29, x30, [sp], #16
  .cfi_adjust_cfa_offset -16
  .cfi_restore x29
  .cfi_restore x30
1:
  ret
end_routine __arm_za_disable

// u64 __arm_get_current_vg(void)
//   The vector granule count (vector length / 64 bits) of the current mode:
//   streaming VG in streaming mode, SVE's VG outside it, 0 without either.
begin_routine __arm_get_current_vg
  adrp x16, cq4p_sme_abi_has_sme
  ldrb w16, [x16, :lo12:cq4p_sme_abi_has_sme]
  cbz w16, 1f
  mrs x16, SVCR
  tbz x16, #0, 1f
  rdsvl x0, #1
  lsr x0, x0, #3
  ret
1:
  adrp x16, cq4p_sme_abi_has_sve
  ldrb w16, [x16, :lo12:cq4p_sme_abi_has_sve]
  cbz w16, 2f
  cntd x0
  ret
2:
  mov x0, xzr
  ret
end_routine __arm_get_current_vg

  .section .note.GNU-stack, "", %progbits
