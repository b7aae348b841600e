// The floor of paged SAXPY on this machine, without nam: how long the local loop takes a
// pass, and how long moving its pages in and out takes, measured side by side.
//
//   gcc -O3 -o /tmp/farmem-copy-floor bench/farmem-copy-floor.c && /tmp/farmem-copy-floor
//
// Paging copies every page that comes in (from the server's memory into a local page; over
// UCX shared memory, from a shared mapping: one copy, UFFDIO_COPY) and every dirty page that
// goes out (one copy back, with streaming stores). SAXPY (y = a x + y over float arrays x and
// y, four passes, like `nam-bench farmem --workload saxpy`) on arrays twice the budget must
// bring in, each pass, at least the half of x and of y that is not resident, and write back
// the half of y it brings in, whatever the replacement. Two floors are printed: the local
// pass plus those copies, over the local pass (one core does both, as in signal mode), and
// the copies alone over the local pass (another core copies while the loop runs, perfectly
// overlapped, if the two did not share the memory bandwidth). Whether they do is measured
// last: a pass while another thread copies 2 MiB pages without pause. The copies are timed between a memfd mapping (the
// server's pool) and huge pages (a region on huge pages), 2 MiB at a time, with both kernel
// (UFFDIO_COPY) in and streaming stores out. Three runs, all printed.
#define _GNU_SOURCE
#include <emmintrin.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define HP (2L << 20)
#define ARRAY (64L << 20) // x and y: 128 MiB in all
#define PAGES (ARRAY / HP)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void *map(long len, int flags, int fd) {
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, flags, fd, 0);
    if (p == MAP_FAILED) die("mmap");
    return p;
}

// Streaming stores (no read of the destination lines), as the pager's write-back does.
static void copy_streaming(char *dst, const char *src, long len) {
    for (long i = 0; i < len; i += 16) _mm_stream_si128((__m128i *)(dst + i), _mm_load_si128((const __m128i *)(src + i)));
    _mm_sfence();
}

static char *copy_from, *copy_to;
static volatile int copying;

// The other core's work while a pass runs: page copies, one after the other.
static void *copier(void *unused) {
    (void)unused;
    while (copying)
        for (long p = 0; p < PAGES && copying; p++) memcpy(copy_to + p * HP, copy_from + p * HP, HP);
    return NULL;
}

int main(void) {
    float *x = map(ARRAY, MAP_PRIVATE | MAP_ANONYMOUS, -1), *y = map(ARRAY, MAP_PRIVATE | MAP_ANONYMOUS, -1);
    long n = ARRAY / sizeof(float);
    for (long i = 0; i < n; i++) x[i] = (i % 1000) * 0.001f, y[i] = 1.0f;
    int fd = memfd_create("server-pool", 0);
    if (fd < 0 || ftruncate(fd, ARRAY) != 0) die("memfd");
    char *pool = map(ARRAY, MAP_SHARED, fd);
    memset(pool, 5, ARRAY);
    char *huge = mmap(NULL, ARRAY, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_NORESERVE, -1, 0);
    if (huge == MAP_FAILED) {
        printf("no huge pages reserved (vm.nr_hugepages): nothing measured\n");
        return 0;
    }
    int uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
    struct uffdio_api api = {.api = UFFD_API};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) die("userfaultfd");
    struct uffdio_register reg = {.range = {(unsigned long)huge, ARRAY}, .mode = UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(uffd, UFFDIO_REGISTER, &reg)) die("UFFDIO_REGISTER");
    for (int run = -1; run < 3; run++) { // run -1 warms up (first use of the huge pages), not printed
        double t = now();
        for (int pass = 0; pass < 4; pass++)
            for (long i = 0; i < n; i++) y[i] = 2.5f * x[i] + y[i];
        double pass_s = (now() - t) / 4;
        t = now();
        for (long p = 0; p < PAGES; p++) {
            struct uffdio_copy c = {.dst = (unsigned long)(huge + p * HP), .src = (unsigned long)(pool + p * HP), .len = HP};
            if (ioctl(uffd, UFFDIO_COPY, &c)) die("UFFDIO_COPY");
        }
        double in_s = (now() - t) / PAGES;
        t = now();
        for (long p = 0; p < PAGES; p++) copy_streaming(pool + p * HP, huge + p * HP, HP);
        double out_s = (now() - t) / PAGES;
        if (madvise(huge, ARRAY, MADV_DONTNEED)) die("madvise");
        // Per pass at 50% local memory: half of x's and half of y's pages in, half of y's out.
        double pages_each = PAGES / 2.0;
        double copies_s = 2 * pages_each * in_s + pages_each * out_s;
        double copies = copies_s / pass_s, serial = (pass_s + copies_s) / pass_s;
        if (run >= 0)
            printf("run %d: local SAXPY pass over 2 x %ld MiB %.2f ms; 2 MiB page in (UFFDIO_COPY from a shared mapping) "
               "%.0f us, out (streaming stores) %.0f us; paged SAXPY at 50%% local memory cannot take less than %.2fx "
               "local time on one core, nor %.2fx with the copies on another core\n",
               run, ARRAY >> 20, pass_s * 1e3, in_s * 1e6, out_s * 1e6, serial, copies > 1 ? copies : 1.0);
    }
    copy_from = pool;
    copy_to = map(ARRAY, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1);
    for (int run = 0; run < 3; run++) {
        double t = now();
        for (long i = 0; i < n; i++) y[i] = 2.5f * x[i] + y[i];
        double alone = now() - t;
        copying = 1;
        pthread_t thread;
        if (pthread_create(&thread, NULL, copier, NULL) != 0) die("pthread_create");
        t = now();
        for (long i = 0; i < n; i++) y[i] = 2.5f * x[i] + y[i];
        double beside = now() - t;
        copying = 0;
        pthread_join(thread, NULL);
        printf("run %d: a local SAXPY pass alone %.2f ms, with page copies running on the other core %.2f ms (%.2fx)\n",
               run, alone * 1e3, beside * 1e3, beside / alone);
    }
    return 0;
}
