// mma16816 (gdl_split.cuh, 5): one m16n8k16 tensor-core tile (f16 or bf16
// in, f32 accumulators), for the chain (gdl_chain_mma.cuh) and the streamed
// attention (gdl_attention.cuh, StreamMma).
#pragma once

#include "gdl_types.cuh"

namespace gdl {

// d += a b for one m16n8k16 tile (row.col, f32 accumulators), f16 or bf16
// by the type of the last argument; the fragments as the PTX ISA lays them.
GDL_DEV void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __half) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
GDL_DEV void mma16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1, __nv_bfloat16) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace gdl
