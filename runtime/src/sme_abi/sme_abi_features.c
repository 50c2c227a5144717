/*===- sme_abi_features.c - what the SME ABI routines may use -------------===*
 *
 * The support routines in sme_abi.S must preserve almost every register, so
 * they cannot ask the OS whether SME exists: this constructor asks once, at
 * load time, and leaves the answer where the assembly reads it.
 *
 *===----------------------------------------------------------------------===*/

#include <sys/auxv.h>

#ifndef HWCAP_SVE
#define HWCAP_SVE (1UL << 22)
#endif
#ifndef HWCAP2_SME
#define HWCAP2_SME (1UL << 23)
#endif

__attribute__((visibility("hidden"))) unsigned char cq4p_sme_abi_has_sme;
__attribute__((visibility("hidden"))) unsigned char cq4p_sme_abi_has_sve;

/* Runs before ordinary constructors, so that C++ static initialisers may
 * already call into SME code. */
__attribute__((constructor(101))) static void cq4p_sme_abi_init(void) {
  cq4p_sme_abi_has_sme = (getauxval(AT_HWCAP2) & HWCAP2_SME) != 0;
  cq4p_sme_abi_has_sve = (getauxval(AT_HWCAP) & HWCAP_SVE) != 0;
}
