// Asynchronous 16-byte copies global -> shared (cp.async, sm_80) and the
// ldmatrix loads that read such tiles into mma fragments: the tensor-core
// matmul (gdl_matmul_mma.cuh) and the grouped attention
// (gdl_attention_group.cuh) stage their operands with them.
#pragma once

#include "gdl_types.cuh"

namespace gdl {

// 16 bytes global -> shared without passing through registers (cp.async;
// the copy lands by the matching cp_async_wait), and the group fences.
GDL_DEV void cp_async16(void* smem_dst, const void* src) {
  const unsigned dst = (unsigned)__cvta_generic_to_shared(smem_dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// The same, or 16 zero bytes when `whole` is false (src is then not read).
GDL_DEV void cp_async16_or_zero(unsigned smem_dst, const void* src, bool whole) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(smem_dst), "l"(src), "r"(whole ? 16 : 0)
               : "memory");
}
GDL_DEV void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int Pending> GDL_DEV void cp_async_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(Pending) : "memory"); }

// Four 8x8 tiles of 16-bit elements from shared memory: lanes 8i .. 8i + 7
// give the addresses of tile i's eight rows (16 bytes each); lane (g, t)
// receives row g, elements 2t and 2t + 1 of each tile, or with .trans
// elements (2t, g) and (2t + 1, g).
GDL_DEV void ldmatrix_x4(unsigned (&r)[4], unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row)
               : "memory");
}
GDL_DEV void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_row)
               : "memory");
}

}  // namespace gdl
