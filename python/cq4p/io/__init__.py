"""Reading and writing files: CQ4 tensor files, bundles, safetensors."""
