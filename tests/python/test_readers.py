"""accelrt's readers on the outputs of real runs: `accelrt run` of a small
job (metrics, summary, checkpoint against `accelrt check`'s plan and the
model's layers; a resumed run's checkpoint against an uninterrupted one's),
a `jobs:` file's trace.json, and damaged copies of each file."""

import array
import json
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import unittest
import zlib

import accelrt

import support
from support import (SMALL_BATCH, SMALL_EVAL_EVERY, SMALL_HIDDEN, SMALL_INPUT,
                     SMALL_ITERATIONS, SMALL_JOB, SMALL_OUT)

try:
    import numpy
except ImportError:
    numpy = None

MULTI_ITERATIONS = 12


def run(*args):
    p = subprocess.run([support.BIN] + list(args), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError("accelrt %s exited with %d:\n%s%s" % (" ".join(args), p.returncode,
                                                                  p.stdout, p.stderr))
    return p.stdout


def flat(v):
    """A tensor's values as a flat Python list, from either form."""
    if isinstance(v, tuple):
        return v[2].tolist()
    return v.reshape(-1).tolist()


def shape_of(v):
    return tuple(v[0]) if isinstance(v, tuple) else tuple(v.shape)


def encode_checkpoint(ckpt, version=2):
    """The bytes of a checkpoint of `version` holding what `ckpt` holds (all
    f32), written here from docs/checkpoint.md (not by the reader)."""
    out = [b"ACCELRTC", struct.pack("<II5qd", version, len(ckpt), ckpt.iteration, ckpt.epoch,
                                    ckpt.rows_in_epoch, ckpt.samples, ckpt.step, ckpt.train_s)]
    for name, v in ckpt.items():
        vals = flat(v)
        n = name.encode()
        if version == 1:
            out.append(struct.pack("<I", len(n)) + n + struct.pack("<q", len(vals)))
        else:
            shape = shape_of(v)
            out.append(struct.pack("<I", len(n)) + n + struct.pack("<BBH", 0, len(shape), 0) +
                       struct.pack("<%dq" % len(shape), *shape))
        out.append(struct.pack("<%df" % len(vals), *vals))
    data = b"".join(out)
    return data + struct.pack("<I", zlib.crc32(data))


class RunOutputs(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binary(cls)
        cls.dir = tempfile.mkdtemp(prefix="accelrt-py-readers-")
        cls.job = os.path.join(cls.dir, "small.yaml")
        with open(cls.job, "w") as f:
            f.write(SMALL_JOB)
        cls.out = os.path.join(cls.dir, "out")
        run("run", cls.job, "--quiet", "--set", "output.dir=" + cls.out)
        cls.plan = run("check", cls.job)
        # The same job stopped at 20 iterations, then resumed to 30.
        cls.resumed = os.path.join(cls.dir, "resumed")
        run("run", cls.job, "--quiet", "--set", "output.dir=" + cls.resumed,
            "--set", "train.iterations=20")
        cls.at20 = os.path.join(cls.dir, "at20.bin")
        shutil.copy(os.path.join(cls.resumed, "checkpoint.bin"), cls.at20)
        run("run", cls.job, "--quiet", "--resume", "--set", "output.dir=" + cls.resumed)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.out, name)

    # ---- metrics.jsonl and summary.json ---------------------------------------------

    def test_metrics(self):
        lines = accelrt.read_metrics(self.path("metrics.jsonl"))
        self.assertEqual(len(lines), SMALL_ITERATIONS // SMALL_EVAL_EVERY)
        self.assertEqual(accelrt.evaluations(lines), lines)
        self.assertEqual([m["iteration"] for m in lines],
                         list(range(SMALL_EVAL_EVERY, SMALL_ITERATIONS + 1, SMALL_EVAL_EVERY)))
        for m in lines:
            self.assertEqual(m["samples"], m["iteration"] * SMALL_BATCH)
            for k in ("train_loss", "test_loss", "p_at_1", "p_at_3", "p_at_5", "samples_per_s"):
                self.assertTrue(math.isfinite(m[k]), k)

    def test_summary(self):
        s = accelrt.read_summary(self.path("summary.json"))
        for k in ("samples_per_s", "loss", "train_loss", "p_at_1", "p_at_3", "p_at_5",
                  "iterations", "epochs", "wall_s", "peak_rss_bytes", "device", "threads",
                  "persistent_bytes", "ephemeral_bytes"):
            self.assertIn(k, s)
        last = accelrt.read_metrics(self.path("metrics.jsonl"))[-1]
        self.assertEqual((s["iterations"], s["samples"], s["device"], s["threads"]),
                         (SMALL_ITERATIONS, SMALL_ITERATIONS * SMALL_BATCH, "host", 1))
        self.assertEqual((s["loss"], s["train_loss"], s["p_at_1"]),
                         (last["test_loss"], last["train_loss"], last["p_at_1"]))

    def test_read_output(self):
        got = accelrt.read_output(self.out)
        self.assertLessEqual({"metrics", "summary", "checkpoint"}, set(got))
        if os.path.exists(self.path("trace.json")):  # runs write one since the trace issue
            self.assertIsInstance(got["trace"], accelrt.Trace)

    # ---- checkpoint.bin ---------------------------------------------------------------

    def test_checkpoint_against_the_plan_and_the_layers(self):
        ckpt = accelrt.read_checkpoint(self.path("checkpoint.bin"))
        # `accelrt check` lists the persistent tensors in the plan's order,
        # with 4 bytes per value.
        plan = [(m.group(1), int(m.group(2)))
                for m in re.finditer(r"(?m)^\s+persistent\s+(\S+)\s+(\d+) B", self.plan)]
        self.assertTrue(plan, self.plan)
        self.assertEqual([(n, 4 * len(flat(v))) for n, v in ckpt.items()], plan)
        # And the layers: sparse 2000 -> dense 32 -> dense 300, Adam's two
        # states per parameter.
        ins = {"hidden": SMALL_INPUT, "out": SMALL_HIDDEN}
        outs = {"hidden": SMALL_HIDDEN, "out": SMALL_OUT}
        # Shapes (version 2): the dense layer the sparse input feeds keeps
        # its weights inputs x width, the others width x inputs.
        wshape = {"hidden": (SMALL_INPUT, SMALL_HIDDEN), "out": (SMALL_OUT, SMALL_HIDDEN)}
        for layer in ("hidden", "out"):
            for part in ("", ".state1", ".state2"):
                self.assertEqual(len(flat(ckpt[layer + part + ".w"])),
                                 ins[layer] * outs[layer])
                self.assertEqual(shape_of(ckpt[layer + part + ".w"]), wshape[layer])
                self.assertEqual(len(flat(ckpt[layer + part + ".b"])), outs[layer])
                self.assertEqual(shape_of(ckpt[layer + part + ".b"]), (outs[layer],))
        s = accelrt.read_summary(self.path("summary.json"))
        self.assertEqual((ckpt.version, ckpt.iteration, ckpt.step, ckpt.samples),
                         (2, SMALL_ITERATIONS, SMALL_ITERATIONS, s["samples"]))
        self.assertEqual(ckpt.header["ntensors"], len(plan))

    def test_checkpoint_values_rebuild_the_file(self):
        # Writing back what was read, from the layout, gives the same bytes,
        # so every value, name and field was read from its place (and the
        # checksum over them is the file's own).
        with open(self.path("checkpoint.bin"), "rb") as f:
            data = f.read()
        for use_numpy in ((False, True) if numpy else (False,)):
            ckpt = accelrt.read_checkpoint(self.path("checkpoint.bin"), numpy=use_numpy)
            self.assertEqual(encode_checkpoint(ckpt), data)
            self.assertEqual(ckpt.crc32, struct.unpack("<I", data[-4:])[0])
            v = next(iter(ckpt.values()))
            if use_numpy:
                self.assertEqual((v.dtype, v.shape), (numpy.dtype("float32"),
                                                      (SMALL_INPUT, SMALL_HIDDEN)))
            else:
                self.assertEqual(v[:2], ((SMALL_INPUT, SMALL_HIDDEN), "float32"))
                self.assertIsInstance(v[2], array.array)

    def test_version_1_checkpoint(self):
        # A version 1 file (what accelrt wrote before shapes) of the same
        # tensors reads back the same values, flat.
        ckpt = accelrt.read_checkpoint(self.path("checkpoint.bin"))
        v1 = accelrt.read_checkpoint(self.damaged(encode_checkpoint(ckpt, 1), "v1.bin"))
        self.assertEqual(v1.version, 1)
        self.assertEqual(list(v1), list(ckpt))
        for name in ckpt:
            self.assertEqual(shape_of(v1[name]), (len(flat(ckpt[name])),))
            self.assertEqual(flat(v1[name]), flat(ckpt[name]), name)

    def test_resumed_checkpoint_equals_the_uninterrupted_one(self):
        straight = accelrt.read_checkpoint(self.path("checkpoint.bin"))
        resumed = accelrt.read_checkpoint(os.path.join(self.resumed, "checkpoint.bin"))
        at20 = accelrt.read_checkpoint(self.at20)
        self.assertEqual(at20.iteration, 20)
        self.assertEqual(list(resumed), list(straight))
        for k in ("iteration", "epoch", "rows_in_epoch", "samples", "step"):
            self.assertEqual(getattr(resumed, k), getattr(straight, k), k)
        for name in straight:
            self.assertEqual(flat(resumed[name]), flat(straight[name]), name)
        # Ten more iterations moved the weights.
        self.assertNotEqual(flat(at20["out.w"]), flat(resumed["out.w"]))

    # ---- damaged files ------------------------------------------------------------------

    def damaged(self, data, name="damaged.bin"):
        p = os.path.join(self.dir, name)
        with open(p, "wb") as f:
            f.write(data)
        return p

    def refused(self, data, needle, offset=None):
        with self.assertRaises(accelrt.FormatError) as e:
            accelrt.read_checkpoint(self.damaged(data))
        self.assertIn(needle, str(e.exception))
        if offset is not None:
            self.assertEqual(e.exception.offset, offset, str(e.exception))
        return e.exception

    def test_truncated_checkpoint(self):
        with open(self.path("checkpoint.bin"), "rb") as f:
            data = f.read()
        self.refused(b"", "not an accelrt checkpoint", 0)
        self.refused(data[:7], "not an accelrt checkpoint", 0)
        self.refused(data[:40], "truncated: 40 bytes", 40)
        for cut in (100, len(data) // 2, len(data) - 5, len(data) - 1):
            self.refused(data[:cut], "checksum", cut - 4)

    def test_corrupted_checkpoint(self):
        with open(self.path("checkpoint.bin"), "rb") as f:
            data = bytearray(f.read())
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        self.refused(bytes(flipped), "fails its checksum", len(data) - 4)
        self.refused(b"ACCELRTX" + bytes(data[8:]), "not an accelrt checkpoint", 0)

        def with_crc(body):
            return bytes(body) + struct.pack("<I", zlib.crc32(bytes(body)))

        body = data[:-4]

        def patched(offset, fmt, value):
            b = bytearray(body)
            struct.pack_into(fmt, b, offset, value)
            return with_crc(b)

        # Damage that keeps a valid checksum (a hand-made file): each field.
        self.refused(patched(8, "<I", 3), "version 3; this reader knows versions 1, 2", 8)
        self.refused(patched(12, "<I", 70000), "declares 70000 tensors", 12)
        self.refused(patched(12, "<I", 13), "ends inside the record of tensor 12",
                     len(body))
        self.refused(patched(12, "<I", 11), "follow its last tensor")
        self.refused(patched(16, "<q", -1), "iteration is -1", 16)
        self.refused(patched(48, "<q", 31), "optimizer step 31 is beyond its 30", 48)
        self.refused(patched(56, "<d", float("nan")), "train_s", 56)
        self.refused(patched(64, "<I", 0), "tensor 0 has a name of 0 bytes", 64)
        self.refused(patched(68, "<B", 0x07), "control characters", 68)
        # The first tensor: "hidden.w", its dtype/nd word at 76, its dims at 80.
        self.refused(patched(76, "<B", 7), "element type 7", 76)
        self.refused(patched(77, "<B", 9), "9 dims", 76)
        self.refused(patched(80, "<q", 1 << 40), "shape 1099511627776x%d" % SMALL_HIDDEN, 80)
        self.refused(patched(80, "<q", -1), "shape -1x", 80)
        # The second tensor renamed to the first's name ("hidden.b" -> "hidden.w").
        first = 64 + 4 + 8 + 4 + 16 + 4 * SMALL_INPUT * SMALL_HIDDEN
        self.assertEqual(body[first + 4:first + 12], b"hidden.b")
        self.refused(patched(first + 11, "<B", ord("w")), "repeats the name 'hidden.w'", first)
        self.refused(with_crc(body + b"\0\0\0\0"), "4 bytes follow its last tensor",
                     len(body))
        e = self.refused(patched(8, "<I", 3), "version 3")
        self.assertIsInstance(e, accelrt.Error)
        self.assertIsInstance(e, ValueError)

    def test_torn_metrics_line(self):
        with open(self.path("metrics.jsonl"), "rb") as f:
            data = f.read()
        whole = accelrt.read_metrics(self.path("metrics.jsonl"))
        last = data.rstrip(b"\n").rfind(b"\n") + 1
        # Killed in the middle of the last line: the lines before it.
        for cut in (last + 1, last + 20, len(data) - 2):
            self.assertEqual(accelrt.read_metrics(self.damaged(data[:cut], "m.jsonl")),
                             whole[:-1])
        # Killed just before the newline: the line is whole.
        self.assertEqual(accelrt.read_metrics(self.damaged(data[:-1], "m.jsonl")), whole)
        # A damaged line that is not the last is an error naming it, at the
        # damaged byte: the quote opening the line's first key (a byte
        # further in could be a digit of a timing figure, where the decoder
        # stops one byte earlier, after "123." say, than at the damage).
        prev = data[:last - 1].rfind(b"\n") + 1
        self.assertEqual(data[prev:prev + 2], b'{"')
        bad = data[:prev + 1] + b"#" + data[prev + 2:]
        with self.assertRaises(accelrt.FormatError) as e:
            accelrt.read_metrics(self.damaged(bad, "m.jsonl"))
        self.assertIn("line %d" % len(whole[:-1]), str(e.exception))
        self.assertEqual(e.exception.offset, prev + 1)
        # A complete last line that is not JSON is not a torn one.
        with self.assertRaises(accelrt.FormatError):
            accelrt.read_metrics(self.damaged(data + b"{not json}\n", "m.jsonl"))
        with self.assertRaises(accelrt.FormatError):
            accelrt.read_metrics(self.damaged(data + b"[1, 2]\n", "m.jsonl"))

    def test_bad_summary(self):
        with open(self.path("summary.json"), "rb") as f:
            data = f.read()
        with self.assertRaises(accelrt.FormatError) as e:
            accelrt.read_summary(self.damaged(data[:-5], "s.json"))
        self.assertIsNotNone(e.exception.offset)
        with self.assertRaises(accelrt.FormatError):
            accelrt.read_summary(self.damaged(b"[1]", "s.json"))
        with self.assertRaises(accelrt.FormatError) as e:
            accelrt.read_summary(os.path.join(self.dir, "absent.json"))
        self.assertIn("cannot read", str(e.exception))


class Trace(unittest.TestCase):
    """A `jobs:` file's trace.json (the lanes runner writes one)."""

    @classmethod
    def setUpClass(cls):
        support.need_binary(cls)
        cls.dir = tempfile.mkdtemp(prefix="accelrt-py-trace-")
        job = os.path.join(cls.dir, "mj.yaml")
        with open(job, "w") as f:
            f.write(support.jobs_file("mj", MULTI_ITERATIONS, 2))
        cls.out = os.path.join(cls.dir, "out")
        run("run", job, "--quiet", "--set", "output.dir=" + cls.out)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_trace(self):
        trace = accelrt.read_trace(os.path.join(self.out, "trace.json"))
        self.assertEqual(trace.display_time_unit, "ms")
        names = accelrt.thread_names(trace)
        self.assertEqual(names[(1, 0)], "admission")
        groups = accelrt.group_by_thread(trace)
        self.assertTrue(groups)
        for (pid, tid), events in groups.items():
            self.assertEqual([e["ts"] for e in events], sorted(e["ts"] for e in events))
            self.assertTrue(all(e["dur"] >= 0 for e in events))
            self.assertIn((pid, tid), names)
        # One iteration span per iteration of each job, numbered from 1.
        iters = [e for e in accelrt.complete_events(trace) if e.get("cat") == "iteration"]
        for job in ("a-1", "a-2"):
            self.assertEqual(sorted(e["args"]["iteration"] for e in iters if e["name"] == job),
                             list(range(1, MULTI_ITERATIONS + 1)))
        self.assertEqual(len(accelrt.complete_events(trace, pid=1)),
                         sum(len(g) for g in groups.values()))
        # The runner's metrics: its own event lines, no evaluations.
        lines = accelrt.read_metrics(os.path.join(self.out, "metrics.jsonl"))
        self.assertEqual(sorted(m["name"] for m in lines if m.get("event") == "job"),
                         ["a-1", "a-2"])
        self.assertEqual(accelrt.evaluations(lines), [])

    def test_bad_trace(self):
        p = os.path.join(self.dir, "bad.json")
        for text, needle in (('{"displayTimeUnit": "ms"}', "no traceEvents"),
                             ('{"traceEvents": [{"name": "x"}]}', "event 0"),
                             ('{"traceEvents": [{"ph": "X", "ts": 1}]}', "no numeric dur"),
                             ('"x"', "JSON object or array"),
                             ('{"traceEvents": [', "not JSON")):
            with open(p, "w") as f:
                f.write(text)
            with self.assertRaises(accelrt.FormatError) as e:
                accelrt.read_trace(p)
            self.assertIn(needle, str(e.exception))
        with open(p, "w") as f:
            json.dump([{"ph": "X", "ts": 2, "dur": 1, "pid": 1, "tid": 2},
                       {"ph": "X", "ts": 1, "dur": 1, "pid": 1, "tid": 2}], f)
        self.assertEqual([e["ts"] for e in accelrt.group_by_thread(accelrt.read_trace(p))[
            (1, 2)]], [1, 2])


if __name__ == "__main__":
    unittest.main()
