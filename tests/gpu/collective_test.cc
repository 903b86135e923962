// Collectives on GPUs through NCCL: a group of one rank on one GPU (against
// the CPU reference and against the program without its collectives; made
// locally and joined by id, then aborted), the refusals at Session::create, and
// (multi-gpu:*, left out by main.cc where fewer than 2 GPUs are seen) a
// tensor-parallel MLP on two GPUs against the CPU reference of both ranks,
// and two ranks whose programs differ refused when their sessions start.
#include <cuda_runtime_api.h>

#include <thread>

#include "gdl/jit.h"
#include "gpu_test_util.h"

using namespace gdl;
using namespace gdl::gpu_test;

namespace {

// Column-parallel up projection, row-parallel down projection, one
// all_reduce of the partial products (docs/language.md "Collectives"); a
// gather and a scatter along the inner axis (transposed around the call),
// an average of a run-time scalar.
std::string tensor_parallel_mlp(int ranks) {
  const std::string f = std::to_string(256 / ranks), r = std::to_string(ranks);
  return "program tp_mlp;\ngroup world ranks(" + r + ");\ndim B in [1, 16] buckets(4, 16);\n"
         "input x : bf16[B, 128];\nparam w_up : bf16[128, " + f + "];\nparam w_down : bf16[" + f + ", 128];\n"
         "scalar alpha : f32 = 0.5;\n"
         "output y : bf16[B, 128];\noutput h : bf16[B, 256];\noutput part : f32[B, " + std::to_string(128 / ranks) + "];\n"
         "output a : f32;\n"
         "let u = silu(x @ w_up);\n"
         "y = all_reduce(u @ w_down) + x;\n"
         "h = all_gather(u, axis = 1);\n"
         "part = reduce_scatter(cast(x, f32) * 2.0, axis = 1, op = max);\n"
         "a = all_reduce(alpha, op = avg);\n";
}

int device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

}  // namespace

TEST_CASE("collectives: a group of one rank on one GPU runs its NCCL calls, graph and eager, every bucket") {
  const Program program = compile_text(tensor_parallel_mlp(1));
  for (int64_t b : {3, 16}) {
    INFO("B = " << b);
    CHECK(check_program(program, seed_for("one rank " + std::to_string(b)), {b}, {}, {{"alpha", 1.75}}));
  }
}

TEST_CASE("semantics: a group of one rank gives what the program without its collectives gives") {
  const Program program = compile_text(tensor_parallel_mlp(1));
  const Program plain = compile_text(
      "program plain;\ndim B in [1, 16] buckets(4, 16);\ninput x : bf16[B, 128];\nparam w_up : bf16[128, 256];\n"
      "param w_down : bf16[256, 128];\noutput y : bf16[B, 128];\ny = silu(x @ w_up) @ w_down + x;\n");
  std::mt19937_64 rng(seed_for("one rank vs plain"));
  std::map<std::string, TensorData> tensors = random_bindings(program, {5}, rng);
  std::unique_ptr<Session> grouped = make_session(program), alone = make_session(plain);
  bind_all(*grouped, tensors);
  bind_all(*alone, tensors);
  const std::map<std::string, TensorData> a = run_and_read(*grouped, false), c = run_and_read(*alone, false);
  // Not bit for bit: the plain program adds x in its matmul's epilogue, before rounding the product.
  CHECK(expect_match({{"y", a.at("y")}}, {{"y", c.at("y")}}, "one rank vs no group"));
}

TEST_CASE("collectives: a rank joined by id (one process per GPU) runs as one made locally, and abort ends its runs") {
  if (cpu_only) return;
  const Program program = compile_text(tensor_parallel_mlp(1));
  Expected<CommunicatorId> id = Communicator::new_id();
  REQUIRE_MESSAGE(id.ok(), id.status().message());
  Expected<std::shared_ptr<Communicator>> joined = Communicator::join(*id, 0, 1, 0);
  REQUIRE_MESSAGE(joined.ok(), joined.status().message());
  CHECK((*joined)->rank() == 0);
  CHECK((*joined)->ranks() == 1);
  CHECK((*joined)->device() == 0);
  SessionOptions options;
  options.communicator = *joined;
  std::unique_ptr<Session> s = make_session(program, options);
  std::mt19937_64 rng(seed_for("joined rank"));
  std::map<std::string, TensorData> tensors = random_bindings(program, {7}, rng);
  bind_all(*s, tensors);
  CHECK(expect_match(run_and_read(*s, false), reference(program, tensors), "graph"));
  CHECK(expect_match(run_and_read(*s, true), reference(program, tensors), "eager"));
  // After abort the session's runs fail with a Status rather than wait.
  (*joined)->abort();
  Expected<std::map<std::string, TensorData>> after = try_run_and_read(*s, false);
  REQUIRE_FALSE(after.ok());
  CHECK(after.status().message().find("communicator was aborted") != std::string::npos);
  // A bad rank is refused before NCCL is asked.
  Expected<std::shared_ptr<Communicator>> outside = Communicator::join(*id, 1, 1, 0);
  REQUIRE_FALSE(outside.ok());
  CHECK(outside.status().code() == StatusCode::kInvalidArgument);
}

TEST_CASE("semantics: wrong communicators, update-served dims and the fallback are refused at create") {
  const Program two = compile_text(tensor_parallel_mlp(2));
  Expected<std::unique_ptr<Session>> none = Session::create(two);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == StatusCode::kInvalidArgument);
  CHECK(none.status().message().find("runs over a group of 2 rank(s) (group world): pass this rank's communicator") !=
        std::string::npos);
  Expected<std::vector<std::shared_ptr<Communicator>>> one = Communicator::create_local({0});
  REQUIRE_MESSAGE(one.ok(), one.status().message());
  Expected<std::unique_ptr<Session>> small = Session::create(two, {.communicator = (*one)[0]});
  REQUIRE_FALSE(small.ok());
  CHECK(small.status().message().find("SessionOptions::communicator is one of 1 ranks") != std::string::npos);

  const Program single = compile_text(tensor_parallel_mlp(1));
  SessionOptions update;
  update.dim_policy = DimPolicyChoice::kUpdate;
  Expected<std::unique_ptr<Session>> updated = Session::create(single, update);
  REQUIRE_FALSE(updated.ok());
  CHECK(updated.status().code() == StatusCode::kFailedPrecondition);
  CHECK(updated.status().message().find("sets the element count of a collective") != std::string::npos);
  SessionOptions fallback;
  fallback.eager_fallback = jit::recompiler();
  Expected<std::unique_ptr<Session>> falling = Session::create(single, fallback);
  REQUIRE_FALSE(falling.ok());
  CHECK(falling.status().message().find("has a process group") != std::string::npos);
  // Named twice, one GPU cannot hold two ranks.
  Expected<std::vector<std::shared_ptr<Communicator>>> twice = Communicator::create_local({0, 0});
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message().find("is named twice") != std::string::npos);
}

TEST_CASE("multi-gpu: a tensor-parallel MLP on two GPUs equals the CPU reference of both ranks") {
  REQUIRE(device_count() >= 2);
  const Program program = compile_text(tensor_parallel_mlp(2));
  Expected<std::vector<std::shared_ptr<Communicator>>> comms = Communicator::create_local({0, 1});
  REQUIRE_MESSAGE(comms.ok(), comms.status().message());
  std::vector<SessionOptions> options(2);
  for (int r = 0; r < 2; ++r) {
    options[static_cast<size_t>(r)].device = r;
    options[static_cast<size_t>(r)].communicator = (*comms)[static_cast<size_t>(r)];
  }
  Expected<std::vector<std::unique_ptr<Session>>> sessions = Session::create_ranks(program, options);
  REQUIRE_MESSAGE(sessions.ok(), sessions.status().message());
  for (int64_t b : {2, 13}) {
    INFO("B = " << b);
    std::mt19937_64 rng(seed_for("two ranks " + std::to_string(b)));
    std::vector<std::map<std::string, TensorData>> tensors;
    for (int r = 0; r < 2; ++r) tensors.push_back(random_bindings(program, {b}, rng));
    std::vector<std::map<std::string, double>> scalars = {{{"alpha", 0.5}}, {{"alpha", 2.5}}};
    Expected<std::vector<std::map<std::string, TensorData>>> want = jit::run_reference_ranks(program, tensors, scalars);
    REQUIRE_MESSAGE(want.ok(), want.status().message());
    for (int r = 0; r < 2; ++r) {
      Session& s = *(*sessions)[static_cast<size_t>(r)];
      bind_all(s, tensors[static_cast<size_t>(r)]);
      GDL_REQUIRE_OK(s.set_scalar("alpha", scalars[static_cast<size_t>(r)].at("alpha")));
    }
    // Graph runs from this thread, every rank's launched before any is read.
    for (int r = 0; r < 2; ++r) GDL_REQUIRE_OK((*sessions)[static_cast<size_t>(r)]->run());
    for (int r = 0; r < 2; ++r)
      CHECK(expect_match(read_outputs(*(*sessions)[static_cast<size_t>(r)]), (*want)[static_cast<size_t>(r)],
                         "graph, rank " + std::to_string(r)));
    // Eager runs, a thread per rank (NCCL's calls wait for the other rank).
    std::vector<Status> eager(2, Status::Ok());
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        Session& s = *(*sessions)[static_cast<size_t>(r)];
        eager[static_cast<size_t>(r)] = try_bind_all(s, tensors[static_cast<size_t>(r)]);
        if (eager[static_cast<size_t>(r)].ok()) eager[static_cast<size_t>(r)] = s.run_eager();
        if (eager[static_cast<size_t>(r)].ok()) eager[static_cast<size_t>(r)] = s.synchronize();
      });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      GDL_REQUIRE_OK(eager[static_cast<size_t>(r)]);
      CHECK(expect_match(read_outputs(*(*sessions)[static_cast<size_t>(r)]), (*want)[static_cast<size_t>(r)],
                         "eager, rank " + std::to_string(r)));
    }
  }
}

TEST_CASE("multi-gpu: ranks whose programs differ are refused when their sessions start, not left waiting") {
  REQUIRE(device_count() >= 2);
  const Program a = compile_text(tensor_parallel_mlp(2));
  std::string other_text = tensor_parallel_mlp(2);
  other_text.replace(other_text.find("op = max"), 8, "op = min");  // the same shapes, another reduction
  const Program b = compile_text(other_text);
  const CommunicatorId id = [] {
    Expected<CommunicatorId> made = Communicator::new_id();
    REQUIRE_MESSAGE(made.ok(), made.status().message());
    return *made;
  }();
  std::vector<Status> created(2, Status::Ok());
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {  // one thread per rank, as one process per GPU would
      Expected<std::shared_ptr<Communicator>> comm = Communicator::join(id, r, 2, r);
      if (!comm) {
        created[static_cast<size_t>(r)] = comm.status();
        return;
      }
      SessionOptions o;
      o.device = r;
      o.communicator = *comm;
      Expected<std::unique_ptr<Session>> s = Session::create(r == 0 ? a : b, o);
      created[static_cast<size_t>(r)] = s.ok() ? Status::Ok() : s.status();
    });
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << created[static_cast<size_t>(r)].message());
    CHECK(created[static_cast<size_t>(r)].code() == StatusCode::kFailedPrecondition);
    CHECK(created[static_cast<size_t>(r)].message().find("differ in order, op, dtype or shape") != std::string::npos);
  }
}
