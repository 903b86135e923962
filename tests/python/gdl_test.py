"""Tests of the Python module `gdl` (python/gdl_module.cc).

Run with the built module on PYTHONPATH:
    PYTHONPATH=build-release/python python3 tests/python/gdl_test.py
The CPU cases compile a program in the process and check the CPU reference
against NumPy. The GPU cases run where a GPU is usable: NumPy arrays and
PyTorch tensors (when torch is installed) bound by copy and by reference,
outputs and states read and viewed through DLPack, a caller's stream, all
against the CPU reference. Without a GPU they are skipped, saying why;
GDL_PYTHON_REQUIRE_GPU=1 (the GPU machine) turns a skip into a failure.
"""

import os
import tempfile
import unittest

import numpy as np

import gdl

PROGRAM = """
program py_check;
dim B in [1, 32] buckets(8, 32);
input  x : f32[B, 64];
param  w : f32[64, 32];
scalar alpha : f32 = 1.0;
state  total : f32[32];
output y : f32[B, 32];
output h : bf16[B, 32];
y = (x @ w) * alpha;
total = total + sum(y, axis = 0);
h = cast(y, bf16);
"""

BAD_PROGRAM = "program bad;\ninput x : f32[4];\noutput y : f32[4];\ny = x + z;\n"


def bf16_round(values):
    """float32 rounded to the nearest bf16 (even on ties), as float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def compile_source(source, directory, **kwargs):
    path = os.path.join(directory, "program.gdl")
    with open(path, "w") as f:
        f.write(source)
    return gdl.compile(path, **kwargs)


class Fixture:
    """One compiled program for the whole file (compiling is the slow part)."""

    directory = tempfile.mkdtemp(prefix="gdl-python-test-")
    _program = None

    @classmethod
    def program(cls):
        if cls._program is None:
            cls._program = compile_source(PROGRAM, cls.directory)
        return cls._program


def reference(program, x, w, total, alpha):
    return gdl.run_reference(program, {"x": x, "w": w, "total": total}, {"alpha": alpha})


def gpu_usable():
    """None when a session can be made, else why not (any error but UNAVAILABLE is a failure)."""
    try:
        gdl.Session(Fixture.program())
        return None
    except gdl.Error as e:
        if not str(e).startswith("UNAVAILABLE"):
            raise
        return str(e)


class CpuTest(unittest.TestCase):
    def test_version(self):
        self.assertRegex(gdl.__version__, r"^\d+\.\d+\.\d+$")

    def test_program_describes_itself(self):
        p = Fixture.program()
        self.assertEqual(p.name, "py_check")
        self.assertEqual([i["name"] for i in p.inputs], ["x"])
        self.assertEqual(p.inputs[0]["shape"], ["B", 64])
        self.assertEqual(p.inputs[0]["dtype"], "f32")
        self.assertEqual([o["name"] for o in p.outputs], ["y", "h"])
        self.assertEqual(p.outputs[1]["dtype"], "bf16")
        self.assertEqual(p.states[0]["shape"], [32])
        self.assertEqual(p.dims, [{"name": "B", "lo": 1, "hi": 32, "buckets": [8, 32]}])
        self.assertEqual(p.scalars, {"alpha": 1.0})
        self.assertGreater(p.node_count, 0)

    def test_save_and_load(self):
        p = Fixture.program()
        path = os.path.join(Fixture.directory, "saved.gdlx")
        p.save(path)
        loaded = gdl.Program.load(path)
        self.assertEqual(loaded.name, p.name)
        with open(path, "rb") as f:
            data = f.read()
        self.assertEqual(gdl.Program.load_bytes(data).node_count, p.node_count)
        with self.assertRaisesRegex(gdl.Error, "DATA_LOSS"):
            gdl.Program.load_bytes(data[: len(data) // 2])
        with self.assertRaisesRegex(gdl.Error, "NOT_FOUND"):
            gdl.Program.load(os.path.join(Fixture.directory, "missing.gdlx"))

    def test_reference_against_numpy(self):
        rng = np.random.default_rng(7)
        x = rng.standard_normal((5, 64), dtype=np.float32)
        w = rng.standard_normal((64, 32), dtype=np.float32)
        total = rng.standard_normal(32, dtype=np.float32)
        out = reference(Fixture.program(), x, w, total, 0.5)
        want = (x.astype(np.float64) @ w) * 0.5
        np.testing.assert_allclose(out["y"], want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(out["total"], total + want.sum(axis=0), rtol=1e-5, atol=1e-3)
        self.assertEqual(out["h"].dtype, np.float32)  # bf16 widened
        np.testing.assert_array_equal(out["h"], bf16_round(out["y"]))

    def test_consts_and_errors(self):
        source = "program c;\nconst N = 4;\nconst S = 1.0;\nconst NEG = false;\ninput x : f32[N];\noutput y : f32[N];\ny = x * S;\n"
        with tempfile.TemporaryDirectory() as d:
            p = compile_source(source, d, consts={"N": 3, "S": 2.5, "NEG": True})
            self.assertEqual(p.inputs[0]["shape"], [3])
            out = gdl.run_reference(p, {"x": np.arange(3, dtype=np.float32)})
            np.testing.assert_array_equal(out["y"], np.array([0, 2.5, 5], dtype=np.float32))
            with self.assertRaisesRegex(gdl.Error, r"COMPILE_ERROR: .*program.gdl:4:9: error:"):
                compile_source(BAD_PROGRAM, d)
        with self.assertRaisesRegex(gdl.Error, "NOT_FOUND"):
            gdl.compile("/nonexistent/program.gdl")

    def test_read_only_and_bool_arrays(self):
        source = "program ro;\ninput x : f32[4];\ninput m : bool[4];\noutput y : f32[4];\ny = where(m, x, 0.0 - x);\n"
        with tempfile.TemporaryDirectory() as d:
            p = compile_source(source, d)
            x = np.frombuffer(np.array([1, 2, 3, 4], dtype=np.float32).tobytes(), dtype=np.float32)  # read-only
            self.assertFalse(x.flags.writeable)
            out = gdl.run_reference(p, {"x": x, "m": np.array([True, False, True, False])})
            np.testing.assert_array_equal(out["y"], np.array([1, -2, 3, -4], dtype=np.float32))
            with self.assertRaisesRegex(gdl.Error, "INVALID_ARGUMENT"):
                gdl.run_reference(p, {"x": x.astype(np.float64), "m": np.ones(4, dtype=bool)})

    def test_reference_refuses_wrong_inputs(self):
        p = Fixture.program()
        w = np.ones((64, 32), dtype=np.float32)
        total = np.zeros(32, dtype=np.float32)
        with self.assertRaisesRegex(gdl.Error, r"INVALID_ARGUMENT: input 'x': expected shape \[5, 64\]"):
            reference(p, np.ones((5, 63), dtype=np.float32), w, total, 1.0)
        with self.assertRaisesRegex(gdl.Error, "NOT_FOUND: missing state 'total'"):
            gdl.run_reference(p, {"x": np.ones((5, 64), dtype=np.float32), "w": w})
        with self.assertRaisesRegex(gdl.Error, "strides|compact|row-major"):
            reference(p, np.ones((64, 5), dtype=np.float32).T, w, total, 1.0)
        with self.assertRaisesRegex(TypeError, "__dlpack__"):
            reference(p, [[1.0] * 64], w, total, 1.0)


class GpuTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        why = gpu_usable()
        if why is not None:
            if os.environ.get("GDL_PYTHON_REQUIRE_GPU") == "1":
                raise AssertionError("GDL_PYTHON_REQUIRE_GPU=1 but no session: " + why)
            raise unittest.SkipTest("no GPU session here: " + why)
        cls.program = Fixture.program()
        cls.rng = np.random.default_rng(11)
        cls.w = cls.rng.standard_normal((64, 32), dtype=np.float32)

    def torch(self):
        """PyTorch, or a skip where it is not installed (a failure on the GPU machine)."""
        try:
            import torch
        except ImportError:
            if os.environ.get("GDL_PYTHON_REQUIRE_GPU") == "1":
                raise
            self.skipTest("torch is not installed")
        return torch

    def session(self, **kwargs):
        s = gdl.Session(self.program, **kwargs)
        s.set_param("w", self.w)
        return s

    def check_outputs(self, got_y, got_h, got_total, x, total_before, alpha):
        want = reference(self.program, x, self.w, total_before, alpha)
        np.testing.assert_allclose(got_y, want["y"], rtol=2e-3, atol=2e-3)  # TF32-free f32 matmul, summed apart
        np.testing.assert_allclose(got_h, want["h"], rtol=1e-2, atol=1e-2)
        np.testing.assert_allclose(got_total, want["total"], rtol=2e-3, atol=1e-2)
        return want["total"]

    def test_numpy_binds_and_reads(self):
        s = self.session()
        total = np.zeros(32, dtype=np.float32)
        # Falling row counts: each bucket's padding then holds an earlier run's rows.
        for rows, alpha in [(32, 2.0), (17, -0.5), (5, 1.0), (8, 0.25)]:
            x = self.rng.standard_normal((rows, 64), dtype=np.float32)
            s.bind("x", x)
            s.set_scalar("alpha", alpha)
            s.run()
            self.assertEqual(s.shape_of("y"), [rows, 32])
            y, h, got_total = s.read("y"), s.read("h"), s.read_state("total")
            self.assertEqual(y.shape, (rows, 32))
            total = self.check_outputs(y, h, got_total, x, total, alpha)

    def test_state_set_and_reset(self):
        s = self.session()
        start = self.rng.standard_normal(32, dtype=np.float32)
        s.set_state("total", start)
        np.testing.assert_array_equal(s.read_state("total"), start)
        x = self.rng.standard_normal((3, 64), dtype=np.float32)
        s.bind("x", x)
        s.run()
        self.check_outputs(s.read("y"), s.read("h"), s.read_state("total"), x, start, 1.0)
        s.reset_state("total")
        np.testing.assert_array_equal(s.read_state("total"), np.zeros(32, dtype=np.float32))

    def test_refusals_change_nothing(self):
        s = self.session()
        x = self.rng.standard_normal((4, 64), dtype=np.float32)
        s.bind("x", x)
        with self.assertRaisesRegex(gdl.Error, "NOT_FOUND"):
            s.bind("nope", x)
        with self.assertRaisesRegex(gdl.Error, "INVALID_ARGUMENT"):
            s.bind("x", x.astype(np.float16))
        with self.assertRaisesRegex(gdl.Error, "OUT_OF_RANGE"):
            s.bind("x", np.ones((33, 64), dtype=np.float32))
        with self.assertRaisesRegex(gdl.Error, "NOT_FOUND"):
            s.read("nope")
        s.run()
        want = reference(self.program, x, self.w, np.zeros(32, dtype=np.float32), 1.0)
        np.testing.assert_allclose(s.read("y"), want["y"], rtol=2e-3, atol=2e-3)

    def test_torch_tensors(self):
        torch = self.torch()
        if not torch.cuda.is_available():
            self.fail("a gdl session exists but torch sees no GPU")
        w = torch.from_numpy(self.w)
        # The caller's stream: the session orders its work on torch's stream.
        stream = torch.cuda.Stream()
        s = gdl.Session(self.program, stream=stream.cuda_stream)
        self.assertEqual(s.stream, stream.cuda_stream)
        s.set_param("w", w)
        total = np.zeros(32, dtype=np.float32)
        with torch.cuda.stream(stream):
            # By copy from device memory: the run copies it.
            x = torch.randn(9, 64, device="cuda")
            s.bind("x", x)
            s.run()
            y = torch.from_dlpack(s.output("y"))  # a view of the session's memory on its own stream
            self.assertEqual(tuple(y.shape), (9, 32))
            self.assertEqual(y.dtype, torch.float32)
            h = torch.from_dlpack(s.output("h"))
            self.assertEqual(h.dtype, torch.bfloat16)
            state = torch.from_dlpack(s.state("total"))
            total = self.check_outputs(y.cpu().numpy(), h.float().cpu().numpy(), state.cpu().numpy(),
                                       x.cpu().numpy(), total, 1.0)
            # The output view matches torch's own product.
            torch.testing.assert_close(y, x @ w.cuda(), rtol=2e-3, atol=2e-3)

            # By reference: no copy, and writing the tensor after the run is
            # done leaves that run's results alone.
            x2 = torch.randn(8, 64, device="cuda")
            x2_before = x2.cpu().numpy()
            s.bind_reference("x", x2)
            s.run()
            y2 = s.read("y")  # waits for the run
            x2.mul_(3.0)  # after the run: its results stay as they are
            total = self.check_outputs(y2, s.read("h"), s.read_state("total"), x2_before, total, 1.0)
            # The next run reads what the tensor holds then.
            s.run()
            total = self.check_outputs(s.read("y"), s.read("h"), s.read_state("total"), x2.cpu().numpy(), total, 1.0)
        # Off the session's stream (torch's default stream here), a view waits for the session first.
        s.bind("x", x)
        s.run()
        y_default = torch.from_dlpack(s.output("y"))
        torch.testing.assert_close(y_default, x @ w.cuda(), rtol=2e-3, atol=2e-3)
        # stream=-1 asks for no synchronization; copy=True is refused.
        s.output("y").__dlpack__(stream=-1)
        with self.assertRaises(BufferError):
            s.output("y").__dlpack__(stream=-1, copy=True)
        # A tensor on the CPU binds too, and bf16 or wrong dtypes are refused.
        s.bind("x", torch.randn(2, 64))
        with self.assertRaisesRegex(gdl.Error, "INVALID_ARGUMENT"):
            s.bind("x", torch.randn(2, 64, device="cuda", dtype=torch.bfloat16))
        with self.assertRaisesRegex(gdl.Error, "strides|compact|row-major"):
            s.bind("x", torch.randn(64, 2, device="cuda").t())

    def test_lifetimes(self):
        torch = self.torch()
        s = self.session()
        # The session keeps a tensor bound by copy from the device until its run is done:
        # freed on the Python side and its memory reused, the run still reads the values bound.
        x = torch.randn(8, 64, device="cuda")
        x_host = x.cpu().numpy()
        s.bind("x", x)
        del x
        torch.cuda.empty_cache()
        garbage = torch.full((1 << 20,), float("nan"), device="cuda")
        s.run()
        want = reference(self.program, x_host, self.w, np.zeros(32, dtype=np.float32), 1.0)
        np.testing.assert_allclose(s.read("y"), want["y"], rtol=2e-3, atol=2e-3)
        del garbage
        # A view keeps the session (and its memory) alive after the last name for it is gone.
        y = torch.from_dlpack(s.output("y"))
        del s
        torch.testing.assert_close(y.cpu(), torch.from_numpy(want["y"]), rtol=2e-3, atol=2e-3)


if __name__ == "__main__":
    unittest.main(verbosity=2)
