"""The high-precision reference: whole, streamed block by block, with an fp32 fallback for ops without an fp64 kernel, and the discrete choices it follows."""
