"""accelrt.Client and python3 -m accelrt against a real `accelrt serve`
started here on its own socket and state folder.

What any server answers (protocol version 2 and later): submit, logs as
text, ps as a table, cancel, errors for a job that does not exist and for a
malformed job file, and the version error a newer request gets.  The tests
of protocol version 3 (ps and logs as JSON) run when the server's replies
carry version 3 or later, and are skipped, saying so, before."""

import json
import os
import tempfile
import unittest

import accelrt
from accelrt import protocol

import support
from support import SMALL_JOB, SMALL_ITERATIONS, SMALL_EVAL_EVERY

# docs/service.md (protocol version 3): the keys of one `ps --json` object
# and the types they hold (None: null allowed).
PS_KEYS = {"id": (int,), "name": (str,), "uid": (int,), "state": (str,),
           "iteration": (int,), "iterations": (int,), "loss": (int, float, None),
           "samples_per_s": (int, float, None), "eta_s": (int, float, None),
           "persistent_bytes": (int,), "lane_bytes": (int,), "lane": (int, None),
           "submitted": (int, float), "started": (int, float, None),
           "ended": (int, float, None), "error": (str, None)}
STATES = {"pending", "queued", "running", "done", "failed", "cancelled"}
LOG_KINDS = {"submitted", "queued", "started", "progress", "done", "failed", "cancelled",
             "resumed", "stopped", "error"}


def state_of(client, job):
    """The job's state in ps's table (ID USER STATE NAME ...)."""
    for line in client.ps_text().splitlines():
        cols = line.split()
        if cols and cols[0] == str(job):
            return cols[2]
    return None


class ServiceTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        support.need_binary(cls)
        cls.server = support.Server().start()
        cls.client = accelrt.Client(cls.server.socket, timeout=60)
        cls.job_file = os.path.join(cls.server.dir, "small.yaml")
        with open(cls.job_file, "w") as f:
            f.write(SMALL_JOB)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def fail(self, msg=None):
        super().fail("%s\n--- server log\n%s" % (msg, self.server.log()))

    def out_dir(self, name):
        return os.path.join(self.server.dir, name)

    def wait_state(self, job, state):
        support.until("job %d to be %s (it is %s)" % (job, state, state_of(self.client, job)),
                      lambda: state_of(self.client, job) == state)

    def v3(self):
        # This tree's server speaks version 3 (ps and logs as JSON).
        self.assertGreaterEqual(self.server.version, 3)

    # ---- any server -------------------------------------------------------------------

    def test_submit_follow_logs_to_the_end(self):
        out = self.out_dir("follow")
        job = self.client.submit(self.job_file, sets={"output.dir": out})
        self.assertIsInstance(job, int)
        log = "".join(self.client.logs_text(job, follow=True))
        self.assertIn("submitted by uid %d from %s" % (os.getuid(),
                                                      os.path.realpath(self.job_file)), log)
        self.assertIn("done: %d iterations" % SMALL_ITERATIONS, log)
        self.assertEqual(state_of(self.client, job), "done")
        # The outputs are where the override put them, and what the job did.
        metrics = accelrt.read_metrics(os.path.join(out, "metrics.jsonl"))
        self.assertEqual([m["iteration"] for m in accelrt.evaluations(metrics)],
                         list(range(SMALL_EVAL_EVERY, SMALL_ITERATIONS + 1, SMALL_EVAL_EVERY)))
        # The runner adds its record of the job.
        ended = [m for m in metrics if m.get("event") == "job"]
        self.assertEqual([(m["status"], m["iterations"]) for m in ended],
                         [("done", SMALL_ITERATIONS)])
        ckpt = accelrt.read_checkpoint(os.path.join(out, "checkpoint.bin"))
        self.assertEqual(ckpt.iteration, SMALL_ITERATIONS)
        # Without follow, the same log, whole.
        self.assertEqual("".join(self.client.logs_text(job)), log)

    def test_cancel_a_long_job(self):
        job = self.client.submit(self.job_file, sets={"output.dir": self.out_dir("long"),
                                                      "train.iterations": 100000000})
        try:
            self.wait_state(job, "running")
            self.client.cancel(job)
            self.wait_state(job, "cancelled")
        finally:
            try:
                self.client.cancel(job)
            except accelrt.ServerError:
                pass  # cancelled above
        log = "".join(self.client.logs_text(job, follow=True))
        self.assertIn("cancel requested by uid %d" % os.getuid(), log)
        with self.assertRaises(accelrt.ServerError) as e:
            self.client.cancel(job)
        self.assertIn("already ended", str(e.exception))

    def test_a_job_that_does_not_exist(self):
        missing = 10 ** 12
        for call in (lambda: self.client.cancel(missing),
                     lambda: list(self.client.logs_text(missing)),
                     lambda: list(self.client.logs_text(missing, follow=True))):
            with self.assertRaises(accelrt.ServerError) as e:
                call()
            self.assertIsInstance(e.exception, accelrt.Error)
            self.assertNotIsInstance(e.exception, accelrt.VersionError)
            self.assertIn("no job %d of yours" % missing, e.exception.text)

    def test_malformed_job_file(self):
        bad = os.path.join(self.server.dir, "bad.yaml")
        with open(bad, "w") as f:
            f.write("name: bad\ntrain: {batch: 32, bogus: 1\n")
        with self.assertRaises(accelrt.ServerError) as e:
            self.client.submit(bad)
        # FILE:LINE:COL: error: ..., FILE the real path the request carried.
        self.assertRegex(e.exception.text, r"^%s:\d+:\d+: error: " % os.path.realpath(bad))
        # A schema error names the key; text submissions are named <string>.
        text = SMALL_JOB.replace("batch: 32,", "batch: 32, bogus: 1,")
        with self.assertRaises(accelrt.ServerError) as e:
            self.client.submit(text)
        self.assertRegex(e.exception.text, r"<string>:\d+:\d+: error: train\.bogus: unknown key")

    def test_relative_paths_resolve_like_the_cli(self):
        # A data path relative to the job file's folder (base) and an
        # output.dir relative to the submitting folder (cwd).
        jobs = os.path.join(self.server.dir, "jobs")
        work = os.path.join(self.server.dir, "work")
        os.makedirs(jobs)
        os.makedirs(work)
        with open(os.path.join(jobs, "points.txt"), "w") as f:
            f.write("64 50 5\n")
            for i in range(64):
                f.write("%d,%d %d:1 %d:0.5\n" % (i % 5, (i + 1) % 5, i % 50, (3 * i) % 50))
        job_file = os.path.join(jobs, "xc.yaml")
        with open(job_file, "w") as f:
            f.write("name: xc\ndevice: host\nmodel:\n  input: {sparse: 50}\n  layers:\n"
                    "    - {name: out, dense: 5, activation: softmax}\n"
                    "data: {train: points.txt, format: xc}\n"
                    "train: {batch: 16, iterations: 4, threads: 1, optimizer: {sgd: {lr: 0.1}}}\n")
        here = os.getcwd()
        os.chdir(work)
        try:
            job = self.client.submit(os.path.join("..", "jobs", "xc.yaml"),
                                     sets=["output.dir=rel-out"])
        finally:
            os.chdir(here)
        log = "".join(self.client.logs_text(job, follow=True))
        self.assertIn("done: 4 iterations", log)
        self.assertTrue(os.path.exists(os.path.join(work, "rel-out", "summary.json")), log)

    def test_keep_generated(self):
        kept, removed = self.out_dir("kept"), self.out_dir("removed")
        a = self.client.submit(self.job_file, sets={"output.dir": kept}, keep_generated=True)
        b = self.client.submit(self.job_file, sets={"output.dir": removed})
        for job in (a, b):
            list(self.client.logs_text(job, follow=True))
            self.assertEqual(state_of(self.client, job), "done")
        self.assertTrue(os.path.exists(os.path.join(kept, "data", "train.txt")))
        self.assertFalse(os.path.exists(os.path.join(removed, "data", "train.txt")))

    def test_a_newer_request_gets_a_version_error(self):
        req = protocol.encode_request("ps", 99)
        with self.assertRaises(accelrt.VersionError) as e:
            list(self.client.request(req, 99))
        self.assertEqual(e.exception.server_version, self.server.version)
        self.assertIn("99", e.exception.text)
        self.assertIn(str(self.server.version), e.exception.text)

    # ---- the command line ---------------------------------------------------------------

    def test_cli(self):
        sock = ["--socket", self.server.socket]
        rc, out, err = support.run_cli("submit", self.job_file, "--set",
                                       "output.dir=" + self.out_dir("cli"), *sock)
        self.assertEqual(rc, 0, err)
        job = int(out.strip())
        rc, out, err = support.run_cli("logs", "-f", str(job), *sock)
        self.assertEqual(rc, 0, err)
        self.assertIn("done: %d iterations" % SMALL_ITERATIONS, out)
        rc, out, err = support.run_cli("ps", *sock)
        self.assertEqual(rc, 0, err)
        self.assertRegex(out, r"(?m)^%d +\S+ +done +%d/%d .* small$" % (job, SMALL_ITERATIONS,
                                                                          SMALL_ITERATIONS))
        # Its output matches the CLI's.
        self.assertEqual(out.split("\n")[0], self.client.ps_text().split("\n")[0])
        # cancel ID...: one request each; a failure makes the status 1 but
        # the other ids are still cancelled.
        long = self.client.submit(self.job_file, sets={"output.dir": self.out_dir("cli-long"),
                                                       "train.iterations": 100000000})
        rc, out, err = support.run_cli("cancel", str(10 ** 12), str(long), *sock)
        self.assertEqual(rc, 1, err)
        self.assertIn("accelrt cancel: error: no job %d of yours" % 10 ** 12, err)
        self.wait_state(long, "cancelled")
        # A job file the server refuses: 1, and its message.
        bad = os.path.join(self.server.dir, "cli-bad.yaml")
        with open(bad, "w") as f:
            f.write("name: [unclosed\n")
        rc, out, err = support.run_cli("submit", bad, *sock)
        self.assertEqual(rc, 1)
        self.assertIn("accelrt submit: error: %s:" % os.path.realpath(bad), err)
        # Usage: 2, nothing sent.
        for args in (["submit", os.path.join(self.server.dir, "absent.yaml")],
                     ["logs", "x"], ["cancel"], ["submit", self.job_file, "--set", "novalue"],
                     ["ps", "extra"], ["frobnicate"]):
            rc, out, err = support.run_cli(*args, *sock)
            self.assertEqual(rc, 2, "%s: %s" % (args, err))
        # No server there: 1.
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = support.run_cli("ps", "--socket", os.path.join(d, "none.sock"))
        self.assertEqual(rc, 1)
        self.assertIn("cannot reach the server", err)
        rc, out, err = support.run_cli("--help")
        self.assertEqual(rc, 0)
        for cmd in ("submit", "ps", "logs", "cancel"):
            self.assertIn(cmd, out)

    # ---- protocol version 3 -------------------------------------------------------------

    def test_v3_ps_json(self):
        self.v3()
        job = self.client.submit(self.job_file, sets={"output.dir": self.out_dir("v3ps")})
        list(self.client.logs_text(job, follow=True))
        jobs = {j["id"]: j for j in self.client.ps()}
        self.assertIn(job, jobs)
        for j in jobs.values():
            self.assertLessEqual(set(PS_KEYS), set(j), j)
            for k, types in PS_KEYS.items():
                ok = (j[k] is None and None in types) or (
                    j[k] is not None and not isinstance(j[k], bool)
                    and isinstance(j[k], tuple(t for t in types if t is not None)))
                self.assertTrue(ok, "%s is %r" % (k, j[k]))
            self.assertIn(j["state"], STATES)
        mine = jobs[job]
        self.assertEqual((mine["state"], mine["name"], mine["uid"]), ("done", "small",
                                                                      os.getuid()))
        self.assertEqual((mine["iteration"], mine["iterations"]),
                         (SMALL_ITERATIONS, SMALL_ITERATIONS))
        self.assertLessEqual(mine["submitted"], mine["started"])
        self.assertLessEqual(mine["started"], mine["ended"])
        self.assertIsNone(mine["error"])
        # The CLI prints the same array.
        rc, out, err = support.run_cli("ps", "--json", "--socket", self.server.socket)
        self.assertEqual(rc, 0, err)
        self.assertIn(job, [j["id"] for j in json.loads(out)])

    def test_v3_logs_json(self):
        self.v3()
        job = self.client.submit(self.job_file, sets={"output.dir": self.out_dir("v3logs")})
        lines = list(self.client.logs(job, follow=True))
        for line in lines:
            self.assertIsInstance(line["time"], (int, float))
            self.assertIn(line["kind"], LOG_KINDS)
            self.assertIsInstance(line["text"], str)
        kinds = [line["kind"] for line in lines]
        # The last line says how the job ended.  (Today's server may log
        # "queued" before "submitted": the runner and the submitting request
        # write the log from two threads.)
        self.assertIn("submitted", kinds)
        self.assertEqual(kinds[-1], "done", lines)
        for line in lines:
            if line["kind"] == "progress":
                self.assertLessEqual(line["iteration"], line["iterations"])
                for k in ("loss", "samples_per_s", "eta_s"):
                    self.assertIn(k, line)
        # Text and JSON tell the same story, line for line.
        text = "".join(self.client.logs_text(job)).splitlines()
        self.assertEqual(len(text), len(lines))
        rc, out, err = support.run_cli("logs", "--json", str(job), "--socket",
                                       self.server.socket)
        self.assertEqual(rc, 0, err)
        self.assertEqual([json.loads(l) for l in out.splitlines()], lines)


if __name__ == "__main__":
    unittest.main()
