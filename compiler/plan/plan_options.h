// What the planning passes may do. Everything is on by default; tests that
// study one pass on one step per value turn the others off, and
// `gdlc --no-fuse` turns fusion off.
#pragma once

namespace gdl::plan {

struct PlanOptions {
  bool fuse_elementwise = true;  // chains and trees of elementwise ops become one step (fuse.h)
  bool fuse_epilogues = true;    // elementwise consumers of a matmul join the matmul's step
  bool fuse_prologues = true;    // a norm whose only use is a matmul's a joins the matmul's step
  bool chain_matmuls = true;     // runs of square matmul steps also get one persistent kernel (chains.h)
};

}  // namespace gdl::plan
