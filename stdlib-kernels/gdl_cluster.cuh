// Thread-block clusters (gdl_split.cuh, 3; sm_90): the block's rank in its
// cluster, the cluster barrier, and loads from another block's shared
// memory of the cluster (distributed shared memory), for a split whose parts
// stay in shared memory (gdl_matmul_tiles.cuh and gdl_matmul_rows.cuh,
// cluster split).
#pragma once

#include "gdl_types.cuh"

namespace gdl {

GDL_DEV unsigned cluster_rank() {
  unsigned r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
GDL_DEV void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
// The address of p (this block's shared memory) in block `rank`'s.
GDL_DEV unsigned cluster_map(const void* p, unsigned rank) {
  const unsigned local = (unsigned)__cvta_generic_to_shared(p);
  unsigned remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
GDL_DEV float cluster_load(unsigned address) {
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(address) : "memory");
  return v;
}
GDL_DEV float4 cluster_load4(unsigned address) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(address) : "memory");
  return v;
}

}  // namespace gdl
