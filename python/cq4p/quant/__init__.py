"""CQ4 quantization and dequantization (FORMAT.md section 2) in numpy."""
