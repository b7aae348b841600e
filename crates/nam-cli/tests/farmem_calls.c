/* Every memory call a program may make, on far memory (run under the LD_PRELOAD library with
 * a local budget smaller than its mappings): madvise with every advice, mprotect, munmap of
 * parts, mremap, mlock, file I/O into and out of far pages, fork then exec, and a forked
 * child that touches far pages the parent had evicted (it must end with the library's fatal
 * status, never read zeros). Prints "ok <step>" per step, "ok all" at the end; any
 * difference from local memory prints "FAIL <step>" and exits 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MB (1UL << 20)
#define BYTES (16 * MB)

static void fail(const char *what) {
    printf("FAIL %s (errno %d)\n", what, errno);
    fflush(stdout);
    exit(1);
}
static unsigned char pat(size_t i, unsigned seed) { return (unsigned char)(i * 31 + (i >> 12) * 7 + seed); }
static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = pat(i, seed);
}
static int same(const unsigned char *p, size_t n, unsigned seed, size_t from) {
    for (size_t i = 0; i < n; i++)
        if (p[i] != pat(from + i, seed)) return 0;
    return 1;
}
static int zeros(const unsigned char *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}
static unsigned char *map(size_t n) {
    void *p = mmap(0, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) fail("mmap");
    if (!zeros(p, n)) fail("mmap reads as zeros");
    return p;
}
static void ok(const char *step) {
    printf("ok %s\n", step);
    fflush(stdout);
}

int main(int argc, char **argv) {
    unsigned char *a = map(BYTES);
    fill(a, BYTES, 1);
    /* Advice that keeps the contents, each on a part of the mapping (some split it). */
    static const int keep[] = {MADV_NORMAL, MADV_RANDOM, MADV_SEQUENTIAL, MADV_WILLNEED, MADV_HUGEPAGE,
                               MADV_NOHUGEPAGE, MADV_COLD, MADV_PAGEOUT, MADV_DONTDUMP, MADV_DODUMP,
                               MADV_MERGEABLE, MADV_UNMERGEABLE, MADV_DONTFORK, MADV_DOFORK,
                               MADV_POPULATE_READ, MADV_POPULATE_WRITE, MADV_WIPEONFORK, MADV_KEEPONFORK,
                               MADV_FREE};
    for (size_t k = 0; k < sizeof keep / sizeof keep[0]; k++) {
        size_t at = (k / 2 % 6) * 2 * MB + 3 * 4096; /* pairs (DONTFORK, DOFORK) share a range */
        if (madvise(a + at, 2 * MB + 4096, keep[k]) != 0) {
            printf("FAIL madvise advice %d (errno %d)\n", keep[k], errno);
            return 1;
        }
        if (keep[k] == MADV_FREE) { /* the contents may go: written again */
            for (size_t i = at; i < at + 2 * MB + 4096; i++) a[i] = pat(i, 1);
        } else if (!same(a + at, 4096, 1, at)) {
            printf("FAIL contents after advice %d\n", keep[k]);
            return 1;
        }
        a[at] = pat(at, 1); /* a write after each */
    }
    if (!same(a, BYTES, 1, 0)) fail("contents after every advice");
    ok("madvise keeps contents");
    if (madvise(a + 4 * MB, MB, MADV_DONTNEED) != 0) fail("madvise MADV_DONTNEED");
    if (!zeros(a + 4 * MB, MB) || !same(a, 4 * MB, 1, 0) || !same(a + 5 * MB, BYTES - 5 * MB, 1, 5 * MB))
        fail("MADV_DONTNEED zeroes its range only");
    if (madvise(a, MB, MADV_REMOVE) == 0 || errno != EINVAL) fail("MADV_REMOVE refused as on private memory");
    fill(a + 4 * MB, MB, 1);
    ok("madvise dontneed");

    if (mprotect(a + MB, MB, PROT_READ) != 0) fail("mprotect read-only");
    if (!same(a, BYTES, 1, 0)) fail("contents read-only");
    if (mprotect(a + MB, MB, PROT_NONE) != 0) fail("mprotect none");
    if (!same(a + 2 * MB, BYTES - 2 * MB, 1, 2 * MB)) fail("contents beside a PROT_NONE range");
    if (mprotect(a + MB, MB, PROT_READ | PROT_WRITE) != 0) fail("mprotect back");
    if (!same(a, BYTES, 1, 0)) fail("contents after mprotect");
    fill(a + MB, MB, 1);
    ok("mprotect");

    unsigned char *b = map(8 * MB);
    fill(b, 8 * MB, 2);
    if (munmap(b + 2 * MB, 2 * MB) != 0) fail("munmap of a part");
    if (!same(b, 2 * MB, 2, 0) || !same(b + 4 * MB, 4 * MB, 2, 4 * MB)) fail("contents around an unmapped part");
    if (munmap(b, 2 * MB) != 0 || munmap(b + 4 * MB, 4 * MB) != 0) fail("munmap of the rest");
    unsigned char *again = map(6 * MB); /* may reuse the pages: zeros all the same */
    ok("munmap of parts");

    unsigned char *c = map(4 * MB);
    fill(c, 4 * MB, 3);
    unsigned char *c2 = mremap(c, 4 * MB, 12 * MB, MREMAP_MAYMOVE);
    if (c2 == MAP_FAILED) fail("mremap grow");
    if (!same(c2, 4 * MB, 3, 0) || !zeros(c2 + 4 * MB, 8 * MB)) fail("contents after mremap grow");
    fill(c2, 12 * MB, 3);
    unsigned char *c3 = mremap(c2, 12 * MB, 2 * MB, 0);
    if (c3 != c2 || !same(c3, 2 * MB, 3, 0)) fail("mremap shrink in place");
    if (munmap(c3, 2 * MB) != 0 || munmap(again, 6 * MB) != 0) fail("munmap after mremap");
    ok("mremap");

    if (mlock(a, 2 * MB) != 0 || munlock(a, 2 * MB) != 0) fail("mlock");
    if (mlockall(MCL_CURRENT) == 0) {
        munlockall();
    } else if (errno != ENOMEM && errno != EPERM && errno != EAGAIN) {
        fail("mlockall");
    }
    if (!same(a, BYTES, 1, 0)) fail("contents after mlock");
    ok("mlock");

    char path[] = "/tmp/nam-farmem-calls-XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) fail("mkstemp");
    unlink(path);
    if (write(fd, a, BYTES) != (ssize_t)BYTES) fail("write from far memory");
    unsigned char *d = map(BYTES);
    if (pread(fd, d, BYTES, 0) != (ssize_t)BYTES || !same(d, BYTES, 1, 0)) fail("pread into far memory");
    if (lseek(fd, 0, SEEK_SET) != 0 || read(fd, d, BYTES) != (ssize_t)BYTES || !same(d, BYTES, 1, 0))
        fail("read into far memory");
    close(fd);
    ok("file io");

    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/true", "true", (char *)0);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail("fork then exec");
    ok("fork then exec");

    madvise(a, BYTES, MADV_PAGEOUT); /* none of it resident: the child cannot have it */
    pid = fork();
    if (pid == 0) {
        unsigned long sum = 0;
        for (size_t i = 0; i < BYTES; i += 4096) sum += a[i];
        printf("forked child read its far memory, sum %lu\n", sum);
        _exit(0);
    }
    if (pid < 0 || waitpid(pid, &status, 0) != pid) fail("fork");
    printf("forked child status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status));
    if (!same(a, BYTES, 1, 0) || !same(d, BYTES, 1, 0)) fail("parent's contents after fork");
    ok("all");
    return 0;
}
