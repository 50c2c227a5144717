"""CQ4 quantization and dequantization (docs/FORMAT.md section 2) in numpy."""
