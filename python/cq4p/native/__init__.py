"""The native parts the package drives: the compiler's tools and the
runtime library's C API."""
