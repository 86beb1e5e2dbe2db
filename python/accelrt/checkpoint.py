"""A reader for ``checkpoint.bin`` (docs/checkpoint.md).

Layout, little-endian::

    "ACCELRTC"  u32 version  u32 ntensors
    i64 iteration, epoch, rows_in_epoch, samples, step   f64 train_s
    version 2: ntensors x { u32 name_len, name, u8 dtype (0 f32, 1 u64),
                            u8 nd, u16 0, nd x i64 dim, the values }
    version 1: ntensors x { u32 name_len, name, i64 count, count x f32 }
    u32 crc32 of every byte before it (zlib's)

It checks what runtime/engine/checkpoint.c checks, in the same order: the
magic, the whole file's CRC-32 before any field is used, every header field
against what a run can write, then the tensor table (names of 1 to 255
bytes without control characters, counts within the bytes present, nothing
left over); and, since it returns a dict, that no name repeats.  Anything
else raises ``FormatError`` with the byte offset where it was found.

Version 2 stores each tensor's element type and shape, and a tensor comes
back with them; version 1 stored only the number of values, so its tensors
come back flat, shape ``(count,)``.
"""

import array
import math
import struct
import sys
import zlib

from .errors import FormatError

MAGIC = b"ACCELRTC"
HEADER = struct.Struct("<8sII5qd")  # magic, version, ntensors, 5 counters, train_s
COUNTERS = ("iteration", "epoch", "rows_in_epoch", "samples", "step")
MAX_TENSORS_V1 = 65536  # version 2: no limit but the file's size
MIN_RECORD_V2 = 4 + 1 + 4 + 4  # a 1-byte name, the dtype/nd word, one f32
MAX_DIMS = 8
DTYPES = {0: ("<f4", "f", "float32", 4), 1: ("<u8", "Q", "uint64", 8)}
MAX_NAME = 255
MAX_COUNT = 1 << 53
FIX = "restore a good checkpoint or train afresh (accelrt run without --resume)"
DAMAGED = "the file is damaged; " + FIX

# The versions this reader knows (docs/checkpoint.md); a later version adds
# its own record reader and keeps these.
VERSIONS = (1, 2)


class Checkpoint(dict):
    """A checkpoint's tensors, ``{name: values}`` in file order (the plan's
    order), where values are a NumPy array of the tensor's shape and type
    (version 1: flat float32) when NumPy is used, else a tuple
    ``(shape, dtype name, array.array)``.  The header is in
    attributes: ``version``, ``iteration``, ``epoch``, ``rows_in_epoch``,
    ``samples``, ``step``, ``train_s``, and ``crc32`` (the stored checksum,
    verified), ``path``."""

    @property
    def header(self):
        """The header's fields as a dict."""
        h = {k: getattr(self, k) for k in ("version",) + COUNTERS + ("train_s",)}
        h["ntensors"] = len(self)
        return h


def _numpy(wanted):
    if wanted is False:
        return None
    try:
        import numpy
    except ImportError:
        if wanted:
            raise
        return None
    return numpy


def read_checkpoint(path, numpy=None):
    """Reads and verifies ``path``; returns a Checkpoint.  numpy: None uses
    NumPy when it can be imported, True requires it, False returns
    ``(shape, dtype, array.array)`` tuples without it.  Raises FormatError
    (what, and at which byte) for a file accelrt would refuse."""
    np = _numpy(numpy)
    path = str(path)
    try:
        with open(path, "rb") as f:
            buf = bytearray(f.read())
    except OSError as e:
        raise FormatError(path, None, "cannot read it: %s" % (e.strerror or e))
    size = len(buf)
    if size < len(MAGIC) or buf[:len(MAGIC)] != MAGIC:
        raise FormatError(path, 0, "not an accelrt checkpoint (it does not start with %s)"
                          % MAGIC.decode())
    if size < HEADER.size + 4:
        raise FormatError(path, size, "truncated: %d bytes, fewer than its header and "
                          "checksum (%d); %s" % (size, HEADER.size + 4, DAMAGED))
    view = memoryview(buf)
    (stored,) = struct.unpack_from("<I", buf, size - 4)
    computed = zlib.crc32(view[:size - 4])
    if stored != computed:
        raise FormatError(path, size - 4, "fails its checksum (stored %08x, computed %08x): it "
                          "is damaged or truncated; %s" % (stored, computed, FIX))
    ckpt = _check_header(path, buf)
    ckpt.crc32 = stored
    end = size - 4
    at = HEADER.size
    for i in range(ckpt.ntensors_declared):
        start = at
        at, name, shape, dtype = _record(path, buf, at, end, i, ckpt.version)
        if name in ckpt:
            raise FormatError(path, start, "tensor %d repeats the name '%s'; %s"
                              % (i, name, DAMAGED))
        ckpt[name] = _values(np, view, at, shape, dtype)
        at += DTYPES[dtype][3] * _product(shape)
    if at != end:
        raise FormatError(path, at, "%d bytes follow its last tensor; %s" % (end - at, DAMAGED))
    del ckpt.ntensors_declared
    return ckpt


def _check_header(path, buf):
    """The header's fields, each checked against what a run can write (the
    checks of check_header in runtime/engine/checkpoint.c)."""
    _, version, ntensors, *counts, train_s = HEADER.unpack_from(buf, 0)
    if version not in VERSIONS:
        raise FormatError(path, 8, "version %d; this reader knows version%s %s "
                          "(docs/checkpoint.md)" % (version, "s" if len(VERSIONS) > 1 else "",
                                                    ", ".join(map(str, VERSIONS))))
    if version == 1 and ntensors > MAX_TENSORS_V1:
        raise FormatError(path, 12, "declares %d tensors, more than the %d a version 1 "
                          "checkpoint holds; %s" % (ntensors, MAX_TENSORS_V1, DAMAGED))
    if version == 2 and ntensors > (len(buf) - HEADER.size - 4) // MIN_RECORD_V2:
        raise FormatError(path, 12, "declares %d tensors, more than its %d bytes can hold; %s"
                          % (ntensors, len(buf), DAMAGED))
    for i, (name, v) in enumerate(zip(COUNTERS, counts)):
        if v < 0 or v > MAX_COUNT:
            raise FormatError(path, 16 + 8 * i, "%s is %d, outside [0, 2^53]; %s"
                              % (name, v, DAMAGED))
    if not math.isfinite(train_s) or train_s < 0:
        raise FormatError(path, 56, "train_s is %r, not a number of seconds; %s"
                          % (train_s, DAMAGED))
    c = dict(zip(COUNTERS, counts))
    # Every iteration trains at least one row; the epoch's rows are among the samples.
    if c["iteration"] > c["samples"] or c["rows_in_epoch"] > c["samples"]:
        raise FormatError(path, 16, "%d iterations and %d rows into the epoch cannot come from "
                          "%d samples (each iteration trains at least one row); %s"
                          % (c["iteration"], c["rows_in_epoch"], c["samples"], DAMAGED))
    if c["step"] > c["iteration"]:
        raise FormatError(path, 48, "optimizer step %d is beyond its %d iterations (one step "
                          "per iteration); %s" % (c["step"], c["iteration"], DAMAGED))
    ckpt = Checkpoint()
    ckpt.path = path
    ckpt.version = version
    ckpt.ntensors_declared = ntensors
    for k, v in c.items():
        setattr(ckpt, k, v)
    ckpt.train_s = train_s
    return ckpt


def _product(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def _record(path, buf, at, end, i, version):
    """Tensor i's record at byte `at` (data ends at `end`): returns the offset
    of its values, its name, its shape and its dtype code."""
    rest = 8 if version == 1 else 4
    if end - at < 4 + 1 + rest:
        raise FormatError(path, at, "ends inside the record of tensor %d; %s" % (i, DAMAGED))
    (name_len,) = struct.unpack_from("<I", buf, at)
    if name_len == 0 or name_len > MAX_NAME or name_len + rest > end - at - 4:
        raise FormatError(path, at, "tensor %d has a name of %d bytes (names hold 1 to %d, "
                          "within the file); %s" % (i, name_len, MAX_NAME, DAMAGED))
    raw = bytes(buf[at + 4:at + 4 + name_len])
    if any(b < 0x20 or b == 0x7F for b in raw):
        raise FormatError(path, at + 4, "tensor %d's name holds control characters; %s"
                          % (i, DAMAGED))
    try:
        name = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FormatError(path, at + 4, "tensor %d's name is not UTF-8; %s" % (i, DAMAGED))
    at += 4 + name_len
    if version == 1:
        (count,) = struct.unpack_from("<q", buf, at)
        left = end - at - 8
        if count < 0 or count > left // 4:
            raise FormatError(path, at, "tensor '%s' claims %d values, but %d bytes are left "
                              "in the file; %s" % (name, count, left, DAMAGED))
        return at + 8, name, (count,), 0
    dtype, nd, pad = struct.unpack_from("<BBH", buf, at)
    if dtype not in DTYPES or nd > MAX_DIMS or pad:
        raise FormatError(path, at, "tensor '%s' has element type %d and %d dims (types 0 f32 "
                          "and 1 u64, at most %d dims); %s" % (name, dtype, nd, MAX_DIMS,
                                                                DAMAGED))
    at += 4
    if nd * 8 > end - at:
        raise FormatError(path, at, "ends inside tensor '%s''s dims; %s" % (name, DAMAGED))
    shape = struct.unpack_from("<%dq" % nd, buf, at)
    at += 8 * nd
    left = end - at
    size = DTYPES[dtype][3]
    if any(d < 0 for d in shape) or size * _product(shape) > left:
        raise FormatError(path, at - 8 * nd, "tensor '%s' has shape %s, more values than the %d "
                          "bytes left in the file; %s" % (name, "x".join(map(str, shape)),
                                                           left, DAMAGED))
    return at, name, tuple(shape), dtype


def _values(np, view, at, shape, dtype):
    npt, code, tname, size = DTYPES[dtype]
    count = _product(shape)
    if np is not None:
        # A view into the file's buffer: one copy of the data in memory.
        return np.frombuffer(view.obj, dtype=npt, count=count, offset=at).reshape(shape)
    a = array.array(code)
    a.frombytes(view[at:at + size * count])
    if sys.byteorder == "big":
        a.byteswap()
    return (tuple(shape), tname, a)
