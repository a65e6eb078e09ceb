#!/usr/bin/env python3
"""Groups `perf report --no-children --sort dso,symbol --stdio` of a
training step into where its time goes: the GEMMs, libtorch's other
kernels, OpenMP's waits, the kernel, our own code (docs/performance.md,
"Training against the machine's GEMM roof"). Reads the report on stdin,
prints each group's share of the samples, largest first."""
import re
import sys

# First match wins: the GEMM's packing copies are MKL's, not copies.
GROUPS = [
    ("GEMM: MKL's sgemm kernels and their packing copies", r"mkl_blas|omp_parallel_acopy|mkl_"),
    ("OpenMP threads waiting (libgomp)", r"^libgomp"),
    ("the kernel (page faults, scheduling)", r"^\[kernel"),
    ("our own code (the dropout masks on rayon threads)", r"^model_throughput|^pipe-stage-train"),
    ("AdamW, fused", r"adam"),
    ("softmax", r"softmax"),
    ("LayerNorm", r"LayerNorm|RowwiseMoments|layer_norm"),
    ("bias gradients (sums)", r"outer_sum|reduce|sum_kernel|Reduce"),
    ("elementwise (GELU, add, mul, masks)", r"VectorizedLoop2d|loop_2d_from_1d|Sleef|basic_loop|cpu_kernel"),
    ("copies (memmove, memset)", r"memmove|memset|copy_"),
    ("oneDNN's JIT code", r"JIT"),
]
LINE = re.compile(r"\s*([\d.]+)%\s+(\S+(?: tid \d+)?)\s+\[.\]\s+(.*)")

shares = {}
for line in sys.stdin:
    match = LINE.match(line)
    if not match:
        continue
    share, dso, symbol = float(match.group(1)), match.group(2), match.group(3)
    group = next((name for name, pattern in GROUPS if re.search(pattern, f"{dso} {symbol}")), "other")
    shares[group] = shares.get(group, 0.0) + share
for name, share in sorted(shares.items(), key=lambda item: -item[1]):
    print(f"{share:6.2f}%  {name}")
