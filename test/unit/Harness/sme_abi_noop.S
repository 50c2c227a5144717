// SME ABI support routines that do nothing: linked only into the negative
// control of SmeLazyZaTest.cpp, to show that the test catches routines that
// do not save and restore ZA.
  .arch armv8.2-a+sme
  .text
  .irp name, __arm_tpidr2_save, __arm_tpidr2_restore, __arm_za_disable, __arm_get_current_vg
  .globl \name
  .type \name, %function
  .p2align 2
\name:
  ret
  .size \name, . - \name
  .endr

  .globl __arm_sme_state
  .type __arm_sme_state, %function
  .p2align 2
__arm_sme_state:
  mov x0, xzr
  mov x1, xzr
  ret
  .size __arm_sme_state, . - __arm_sme_state

  .section .note.GNU-stack, "", %progbits
