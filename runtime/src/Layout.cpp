//===- Layout.cpp - the C API's structures as this library lays them out --===//
//
// cq4p_struct_layout (cq4p.h): every field's offset and size, and every
// structure's size, as the compiler laid them out when it built this
// library. Bindings that mirror the structures (the Python package's ctypes
// classes) check themselves against it instead of trusting that their copy
// of the header is this library's.
//
//===----------------------------------------------------------------------===//

#include "cq4p/cq4p.h"

#include <cstddef>
#include <iterator>

namespace {

#define CQ4P_FIELD(type, member)                                               \
  cq4p_layout_entry {                                                          \
    #type, #member, offsetof(type, member), sizeof(type::member)               \
  }
#define CQ4P_STRUCT(type)                                                      \
  cq4p_layout_entry { #type, nullptr, 0, sizeof(type) }

const cq4p_layout_entry kLayout[] = {
    CQ4P_STRUCT(cq4p_tensor_info),
    CQ4P_FIELD(cq4p_tensor_info, flags),
    CQ4P_FIELD(cq4p_tensor_info, alignment),
    CQ4P_FIELD(cq4p_tensor_info, precision),
    CQ4P_FIELD(cq4p_tensor_info, ndim),
    CQ4P_FIELD(cq4p_tensor_info, dims),
    CQ4P_FIELD(cq4p_tensor_info, group_size),
    CQ4P_FIELD(cq4p_tensor_info, num_groups),
    CQ4P_FIELD(cq4p_tensor_info, layout),
    CQ4P_FIELD(cq4p_tensor_info, orthogonal),
    CQ4P_FIELD(cq4p_tensor_info, header_bytes),
    CQ4P_FIELD(cq4p_tensor_info, scales_offset),
    CQ4P_FIELD(cq4p_tensor_info, scales_bytes),
    CQ4P_FIELD(cq4p_tensor_info, data_offset),
    CQ4P_FIELD(cq4p_tensor_info, data_bytes),
    CQ4P_FIELD(cq4p_tensor_info, file_bytes),

    CQ4P_STRUCT(cq4p_model_options),
    CQ4P_FIELD(cq4p_model_options, threads),
    CQ4P_FIELD(cq4p_model_options, context),
    CQ4P_FIELD(cq4p_model_options, prefill_chunk),

    CQ4P_STRUCT(cq4p_model_info),
    CQ4P_FIELD(cq4p_model_info, vocab),
    CQ4P_FIELD(cq4p_model_info, hidden),
    CQ4P_FIELD(cq4p_model_info, layers),
    CQ4P_FIELD(cq4p_model_info, context),
    CQ4P_FIELD(cq4p_model_info, prefill_chunk),
    CQ4P_FIELD(cq4p_model_info, position),
    CQ4P_FIELD(cq4p_model_info, kv_dtype),
    CQ4P_FIELD(cq4p_model_info, target),
    CQ4P_FIELD(cq4p_model_info, architecture),

    CQ4P_STRUCT(cq4p_sampling),
    CQ4P_FIELD(cq4p_sampling, temperature),
    CQ4P_FIELD(cq4p_sampling, top_k),
    CQ4P_FIELD(cq4p_sampling, top_p),
    CQ4P_FIELD(cq4p_sampling, seed),

    CQ4P_STRUCT(cq4p_generate_stats),
    CQ4P_FIELD(cq4p_generate_stats, prompt_tokens),
    CQ4P_FIELD(cq4p_generate_stats, generated_tokens),
    CQ4P_FIELD(cq4p_generate_stats, prefill_seconds),
    CQ4P_FIELD(cq4p_generate_stats, decode_seconds),
    CQ4P_FIELD(cq4p_generate_stats, time_to_first_token_seconds),

    CQ4P_STRUCT(cq4p_tokenizer_info),
    CQ4P_FIELD(cq4p_tokenizer_info, kind),
    CQ4P_FIELD(cq4p_tokenizer_info, vocab),
    CQ4P_FIELD(cq4p_tokenizer_info, bos),
    CQ4P_FIELD(cq4p_tokenizer_info, stop_count),
    CQ4P_FIELD(cq4p_tokenizer_info, stop_ids),
    CQ4P_FIELD(cq4p_tokenizer_info, prefix_count),
    CQ4P_FIELD(cq4p_tokenizer_info, prefix_ids),
    CQ4P_FIELD(cq4p_tokenizer_info, chat_format),

    CQ4P_STRUCT(cq4p_chat_options),
    CQ4P_FIELD(cq4p_chat_options, size),
    CQ4P_FIELD(cq4p_chat_options, enable_thinking),
    CQ4P_FIELD(cq4p_chat_options, show_thinking),

    CQ4P_STRUCT(cq4p_text_options),
    CQ4P_FIELD(cq4p_text_options, max_new_tokens),
    CQ4P_FIELD(cq4p_text_options, sampling),
    CQ4P_FIELD(cq4p_text_options, stop_strings),
    CQ4P_FIELD(cq4p_text_options, stop_string_count),
    CQ4P_FIELD(cq4p_text_options, add_special),
    CQ4P_FIELD(cq4p_text_options, ignore_stop_ids),

    // The table's own entries: a binding reads the table through its mirror
    // of this structure, and checks that mirror with the rest.
    CQ4P_STRUCT(cq4p_layout_entry),
    CQ4P_FIELD(cq4p_layout_entry, structure),
    CQ4P_FIELD(cq4p_layout_entry, field),
    CQ4P_FIELD(cq4p_layout_entry, offset),
    CQ4P_FIELD(cq4p_layout_entry, size),
};

#undef CQ4P_FIELD
#undef CQ4P_STRUCT

} // namespace

extern "C" const cq4p_layout_entry *cq4p_struct_layout(size_t *count) {
  if (count != nullptr)
    *count = std::size(kLayout);
  return kLayout;
}
