/*
 * A file in memory for harnesses whose code under test opens a path (the
 * checkpoint loader, the data reader): one memfd per process, rewritten
 * for every input and named by its /proc/self/fd/N path, which opens as
 * a regular file (as ar_fs_open_read requires) at offset 0.  Nothing
 * touches the disk, so a fuzzer runs at memory speed and leaves nothing
 * behind.  Used by fuzz_ckpt.c and fuzz_reader.c.
 */
#ifndef ACCELRT_FUZZ_MEMFILE_H
#define ACCELRT_FUZZ_MEMFILE_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Writes head then tail (either may be empty) as the whole file and
 * returns its path (static storage).  Aborts when the system refuses a
 * memfd: the harness cannot run at all then. */
static const char *memfile_write(const void *head, size_t nhead, const void *tail,
                                 size_t ntail) {
  static int fd = -1;
  static char path[64];
  if (fd < 0) {
    fd = memfd_create("accelrt-fuzz", 0);
    if (fd < 0) {
      perror("memfd_create");
      abort();
    }
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  }
  if (ftruncate(fd, 0) != 0 ||
      (nhead && pwrite(fd, head, nhead, 0) != (ssize_t)nhead) ||
      (ntail && pwrite(fd, tail, ntail, (off_t)nhead) != (ssize_t)ntail)) {
    perror("writing the memfd");
    abort();
  }
  return path;
}

#endif
