/* What the kernel returns for one read of FILE, by four roads: pread and
 * io_uring (IORING_OP_READ, inline and forced async with IOSQE_ASYNC), each
 * on a buffered and on an O_DIRECT descriptor. Used against the faultfs
 * FUSE mount (tests/python/faultfs.py) to see whether a read that fails
 * part-way or crosses the end of the file reports more bytes than it read.
 *
 *   uring_read_probe FILE SOURCE OFFSET LENGTH [ROAD]
 *
 * SOURCE is the same file read directly (the truth). For each road one line:
 *   ROAD FD_KIND result=R valid=V garbage=G
 * R is the byte count or -errno the kernel returned; V the bytes from the
 * start of the buffer that equal SOURCE; G how many of the first R bytes
 * differ from SOURCE (bytes reported read that are not the file's: past its
 * end or in a failed range), and S how many of those G still hold the
 * buffer's earlier contents (the 0xA5 sentinel written before the read).
 * ROAD (0..5) runs one road only; PROBE_DUMP=FILE writes the buffer after
 * the (last) read there. Cached pages are dropped before every read.
 * Build: cc -O2 -o uring_read_probe uring_read_probe.c -luring */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static unsigned char *truth;
static ssize_t truth_len;

static long long read_pread(int fd, void *buffer, size_t length, off_t offset) {
  ssize_t got = pread(fd, buffer, length, offset);
  return got < 0 ? -errno : got;
}

static long long read_uring(int fd, void *buffer, size_t length, off_t offset, int async) {
  struct io_uring ring;
  int status = io_uring_queue_init(4, &ring, 0);
  if (status < 0) return status;
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  io_uring_prep_read(sqe, fd, buffer, (unsigned)length, offset);
  if (async) sqe->flags |= IOSQE_ASYNC;
  io_uring_submit(&ring);
  struct io_uring_cqe *cqe;
  status = io_uring_wait_cqe(&ring, &cqe);
  long long result = status < 0 ? status : cqe->res;
  if (status == 0) io_uring_cqe_seen(&ring, cqe);
  io_uring_queue_exit(&ring);
  return result;
}

static void report(const char *road, const char *kind, long long result, const unsigned char *buffer,
                   size_t length, off_t offset) {
  size_t valid = 0, garbage = 0, stale = 0;
  for (size_t i = 0; i < length; ++i) {
    int same = (off_t)i + offset < truth_len && buffer[i] == truth[offset + i];
    if (same && valid == i) ++valid;
    if (!same && (long long)i < result) {
      ++garbage;
      stale += buffer[i] == 0xA5;
    }
  }
  printf("%s %s result=%lld valid=%zu garbage=%zu stale=%zu\n", road, kind, result, valid, garbage, stale);
}

int main(int argc, char **argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: %s FILE SOURCE OFFSET LENGTH [ROAD]\n", argv[0]);
    return 2;
  }
  off_t offset = atoll(argv[3]);
  size_t length = (size_t)atoll(argv[4]);
  FILE *source = fopen(argv[2], "rb");
  if (source == NULL) { perror(argv[2]); return 1; }
  fseek(source, 0, SEEK_END);
  truth_len = ftell(source);
  fseek(source, 0, SEEK_SET);
  truth = malloc(truth_len + 1);
  if (fread(truth, 1, truth_len, source) != (size_t)truth_len) { perror("fread"); return 1; }
  fclose(source);
  unsigned char *buffer;
  if (posix_memalign((void **)&buffer, 4096, length + 4096) != 0) return 1;
  static const struct { const char *name; int flags; } kinds[] = {{"buffered", 0}, {"O_DIRECT", O_DIRECT}};
  static const struct { const char *name; int uring, async; } roads[] = {
      {"pread", 0, 0}, {"uring", 1, 0}, {"uring_async", 1, 1}};
  for (size_t k = 0; k < 2; ++k) {
    for (size_t r = 0; r < 3; ++r) {
      if (argc == 6 && (size_t)atoi(argv[5]) != k * 3 + r) continue;
      int fd = open(argv[1], O_RDONLY | kinds[k].flags);
      if (fd < 0) { printf("%s %s open=-%d\n", roads[r].name, kinds[k].name, errno); continue; }
      posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
      memset(buffer, 0xA5, length);  /* a sentinel: "garbage" is what was never written */
      long long result = roads[r].uring ? read_uring(fd, buffer, length, offset, roads[r].async)
                                        : read_pread(fd, buffer, length, offset);
      report(roads[r].name, kinds[k].name, result, buffer, length, offset);
      const char *dump = getenv("PROBE_DUMP");  /* the buffer after the read, to look into */
      if (dump != NULL) {
        FILE *out = fopen(dump, "wb");
        if (out != NULL) {
          fwrite(buffer, 1, length, out);
          fclose(out);
        }
      }
      close(fd);
    }
  }
  return 0;
}
