/* An LD_PRELOAD library for tests/faults: the Nth write (or sync) to a file whose path contains
 * $PTX_FAULT_MATCH fails with $PTX_FAULT_ERRNO, as a full disk, an exceeded quota or a failing
 * device would make it fail.
 *
 * It sits in front of every way the export writes a file: write/pwrite/writev (Python's file
 * objects, SQLite's pages), fwrite (stdio, numpy's tofile), copy_file_range (the splice), fsync and
 * fdatasync; the path of a descriptor is read from /proc/self/fd.  Counting is per process
 * (the export's workers write no such file).
 *
 *   PTX_FAULT_MATCH   substring of the paths counted (required; nothing is counted without it)
 *   PTX_FAULT_KIND    "write" (every kind of write) or "sync" (fsync, fdatasync): what N counts
 *   PTX_FAULT_NTH     the call of that kind that fails (0: none, only count)
 *   PTX_FAULT_ERRNO   its errno (default ENOSPC)
 *   PTX_FAULT_STICKY  1: every later call of that kind fails too (a disk that stays full)
 *   PTX_FAULT_LOG     a file to append "KIND N OP PATH" to for each call counted (to debug a test)
 *   PTX_FAULT_REPORT  a file to append "writes=W syncs=S fired=F op=OP" (OP: the call that
 *                     failed first) to at exit, by each process that counted anything (a forked
 *                     child counts from zero)
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

static const char *match;
static int kind_sync;
static long nth;
static int fail_errno = ENOSPC;
static int sticky;
static const char *report;
static const char *log_path;
static long writes, syncs, fired;
static const char *fired_op = "-"; /* the call that failed first, for the test's message */

static void forked(void) {
    writes = syncs = fired = 0;
    fired_op = "-";
}

__attribute__((constructor)) static void init(void) {
    const char *s;
    match = getenv("PTX_FAULT_MATCH");
    if (match && !*match)
        match = NULL;
    s = getenv("PTX_FAULT_KIND");
    kind_sync = s && strcmp(s, "sync") == 0;
    s = getenv("PTX_FAULT_NTH");
    nth = s ? atol(s) : 0;
    s = getenv("PTX_FAULT_ERRNO");
    if (s && atoi(s) > 0)
        fail_errno = atoi(s);
    s = getenv("PTX_FAULT_STICKY");
    sticky = s && strcmp(s, "1") == 0;
    report = getenv("PTX_FAULT_REPORT");
    log_path = getenv("PTX_FAULT_LOG");
    pthread_atfork(NULL, NULL, forked);
}

__attribute__((destructor)) static void done(void) {
    if (!report || !match || !(writes || syncs || fired))
        return;
    FILE *f = fopen(report, "a");
    if (!f)
        return;
    fprintf(f, "writes=%ld syncs=%ld fired=%ld op=%s\n", __atomic_load_n(&writes, __ATOMIC_SEQ_CST),
            __atomic_load_n(&syncs, __ATOMIC_SEQ_CST), __atomic_load_n(&fired, __ATOMIC_SEQ_CST), fired_op);
    fclose(f);
}

static int watched(int fd, char *path, size_t size) {
    char link[64];
    ssize_t n;
    if (!match || fd < 0)
        return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    n = readlink(link, path, size - 1);
    if (n <= 0)
        return 0;
    path[n] = 0;
    return strstr(path, match) != NULL;
}

/* Count a call on ``fd`` of the given kind; 1 if it is to fail (errno is set). */
static int should_fail(int fd, int is_sync, const char *op) {
    int saved = errno;
    char path[4096];
    if (!watched(fd, path, sizeof path)) {
        errno = saved;
        return 0;
    }
    long k = __atomic_add_fetch(is_sync ? &syncs : &writes, 1, __ATOMIC_SEQ_CST);
    if (log_path) {
        FILE *f = fopen(log_path, "a");
        if (f) {
            fprintf(f, "%s %ld %s %s\n", is_sync ? "sync" : "write", k, op, path);
            fclose(f);
        }
    }
    errno = saved;
    if (nth <= 0 || is_sync != kind_sync || k < nth || (k > nth && !sticky))
        return 0;
    if (__atomic_add_fetch(&fired, 1, __ATOMIC_SEQ_CST) == 1)
        fired_op = op;
    errno = fail_errno;
    return 1;
}

#define REAL(name) \
    static __typeof__(&name) real_##name; \
    if (!real_##name) real_##name = (__typeof__(&name))dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write);
    if (should_fail(fd, 0, "write"))
        return -1;
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t off) {
    REAL(pwrite);
    if (should_fail(fd, 0, "pwrite"))
        return -1;
    return real_pwrite(fd, buf, count, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off_t off) {
    REAL(pwrite64);
    if (should_fail(fd, 0, "pwrite64"))
        return -1;
    return real_pwrite64(fd, buf, count, off);
}

ssize_t writev(int fd, const struct iovec *iov, int n) {
    REAL(writev);
    if (should_fail(fd, 0, "writev"))
        return -1;
    return real_writev(fd, iov, n);
}

ssize_t pwritev(int fd, const struct iovec *iov, int n, off_t off) {
    REAL(pwritev);
    if (should_fail(fd, 0, "pwritev"))
        return -1;
    return real_pwritev(fd, iov, n, off);
}

ssize_t copy_file_range(int fd_in, off_t *off_in, int fd_out, off_t *off_out, size_t len, unsigned int flags) {
    REAL(copy_file_range);
    if (should_fail(fd_out, 0, "copy_file_range"))
        return -1;
    return real_copy_file_range(fd_in, off_in, fd_out, off_out, len, flags);
}

size_t fwrite(const void *ptr, size_t size, size_t n, FILE *stream) {
    REAL(fwrite);
    if (size && n && should_fail(fileno(stream), 0, "fwrite"))
        return 0; /* as a failed write: nothing written, errno set */
    return real_fwrite(ptr, size, n, stream);
}

int fsync(int fd) {
    REAL(fsync);
    if (should_fail(fd, 1, "fsync"))
        return -1;
    return real_fsync(fd);
}

int fdatasync(int fd) {
    REAL(fdatasync);
    if (should_fail(fd, 1, "fdatasync"))
        return -1;
    return real_fdatasync(fd);
}
