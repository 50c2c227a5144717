/*===- fp16.h - IEEE half precision widened to single, exactly -------------===*
 *
 * Shared by the C encoder and the C++ reader (one definition).
 *
 *===----------------------------------------------------------------------===*/

#ifndef CQ4P_RUNTIME_SRC_FP16_H
#define CQ4P_RUNTIME_SRC_FP16_H

#include <stdint.h>
#include <string.h>

/* Every binary16 value is a binary32 value: this conversion is exact. */
static inline float cq4p_half_to_float(uint16_t half) {
  uint32_t sign = (uint32_t)(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  uint32_t bits;
  float value;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13); /* inf or nan */
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign; /* signed zero */
  } else {
    /* Subnormal: shift the mantissa up until its leading one is implicit. */
    uint32_t shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    bits = sign | ((113u - shift) << 23) | ((mantissa & 0x3FFu) << 13);
  }
  memcpy(&value, &bits, sizeof(value));
  return value;
}

static inline int cq4p_half_is_finite(uint16_t half) {
  return ((half >> 10) & 0x1Fu) != 0x1Fu;
}

#endif /* CQ4P_RUNTIME_SRC_FP16_H */
