"""``python3 -m accelrt``: the CLI's service commands (submit, ps, logs,
cancel) in Python, with the CLI's output and exit codes: 0 done, 1 failed
(the server refused, or could not be reached), 2 usage (a bad option, a job
file that cannot be read).  Errors go to stderr as the CLI words them
("accelrt CMD: error: MESSAGE" for the server's refusals)."""

import argparse
import os
import sys

from .client import Client, default_socket
from .errors import Error, ServerError, UsageError

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _job_id(s):
    if not (s.isdigit() and s.isascii()) or len(s) > 19:
        raise argparse.ArgumentTypeError("'%s' is not a job id (a number, see ps)" % s)
    return int(s)


def _override(s):
    if "=" not in s:
        raise argparse.ArgumentTypeError("--set takes KEY=VALUE, got '%s'" % s)
    return s


def _parser():
    p = argparse.ArgumentParser(
        prog="python3 -m accelrt",
        description="Submit, list, follow and cancel jobs of an accelrt server (accelrt "
                    "serve), as the accelrt CLI does.  Exit status: 0 done, 1 failed, 2 usage.",
        epilog="The socket: --socket, else $ACCELRT_SOCKET, else $XDG_RUNTIME_DIR/accelrt.sock "
               "when your own server runs (not for root), else /run/accelrt/accelrt.sock "
               "(now: %s)." % default_socket())
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    def command(name, help):
        c = sub.add_parser(name, help=help, description=help)
        c.add_argument("--socket", metavar="PATH", help="the server's socket")
        return c

    c = command("submit", "submit a job file; prints the job's id")
    c.add_argument("job", metavar="JOB.yaml", help="the job file")
    c.add_argument("--set", dest="sets", metavar="KEY=VALUE", action="append", default=[],
                   type=_override, help="override a key of the job file (repeatable)")
    c.add_argument("--keep-generated", action="store_true",
                   help="keep data.generate's files when the job ends")
    c = command("ps", "list your jobs (root: all jobs)")
    c.add_argument("--json", action="store_true",
                   help="a JSON array, one object per job (protocol version 3)")
    c = command("logs", "print a job's log")
    c.add_argument("id", metavar="ID", type=_job_id, help="the job's id (see ps)")
    c.add_argument("-f", "--follow", action="store_true",
                   help="keep printing as the job runs, until it ends")
    c.add_argument("--json", action="store_true",
                   help="one JSON object per line (protocol version 3)")
    c = command("cancel", "cancel jobs (one request each)")
    c.add_argument("ids", metavar="ID", nargs="+", type=_job_id, help="job ids (see ps)")
    return p


class _Out:
    """Prints text as it comes and remembers whether it ended a line."""

    def __init__(self):
        self.last = "\n"

    def write(self, text):
        if text:
            sys.stdout.write(text)
            sys.stdout.flush()
            self.last = text[-1]

    def end_line(self):
        if self.last != "\n":
            self.write("\n")


def _report(cmd, e):
    if isinstance(e, ServerError):
        print("accelrt %s: error: %s" % (cmd, str(e).rstrip("\n")), file=sys.stderr)
    elif isinstance(e, UsageError):
        print("accelrt %s: %s" % (cmd, e), file=sys.stderr)
    else:
        print("accelrt: %s" % e, file=sys.stderr)
    return EXIT_USAGE if isinstance(e, UsageError) else EXIT_FAIL


def _run(args, out):
    client = Client(args.socket)
    if args.cmd == "submit":
        out.write("%d" % client.submit(args.job, sets=args.sets,
                                       keep_generated=args.keep_generated))
    elif args.cmd == "ps":
        out.write(client.ps_text(json=args.json))
    elif args.cmd == "logs":
        for chunk in client.logs_text(args.id, follow=args.follow, json=args.json):
            out.write(chunk)
    out.end_line()
    return EXIT_OK


def _cancel(args, out):
    client = Client(args.socket)
    rc = EXIT_OK
    for job in args.ids:
        try:
            out.write(client.cancel(job))
            out.end_line()
        except Error as e:
            out.end_line()
            rc = max(rc, _report("cancel", e))
    return rc


def main(argv=None):
    args = _parser().parse_args(argv)
    out = _Out()
    try:
        return _cancel(args, out) if args.cmd == "cancel" else _run(args, out)
    except Error as e:
        out.end_line()
        return _report(args.cmd, e)
    except KeyboardInterrupt:
        out.end_line()
        return 130
    except BrokenPipeError:
        # The reader of our output left (`| head`): stop quietly.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAIL
