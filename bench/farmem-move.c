// Paging without nam, two ways of installing pages: what the pager does (UFFDIO_COPY from a
// buffer, victims dropped with MADV_DONTNEED) against recycling pages with UFFDIO_MOVE
// (Linux 6.8+: the victims are moved out into a small pool of pages, and the next fetch
// fills a pool page and moves it in, so no page is ever allocated, zeroed, copied by the
// kernel or freed). Signal mode (UFFD_FEATURE_SIGBUS), one thread, budget half the region.
//
//   gcc -O2 -o /tmp/farmem-move bench/farmem-move.c && /tmp/farmem-move
//
// Two access patterns, each run five times, alternating the two ways:
// - random: reads of random pages of a 128 MiB region (friends-of-friends and memcached
//   miss like this); one page per fault; the copy way drops 16 random victims with one
//   process_madvise(2), the move way moves single victims out. The moved-in page arrives
//   writable (UFFDIO_MOVE makes the destination writable), so a page that must stay
//   write-protected for dirty tracking needs one UFFDIO_WRITEPROTECT more: both with and
//   without it are printed.
// - runs: SAXPY over x (read) and y (read and written), 16 pages per fault and per victim;
//   x's runs are write-protected after the move, y's stay writable (they are dirty anyway).
// "us/miss" and "us/page" are the whole loop's time divided by the faults or pages.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef UFFDIO_MOVE
struct uffdio_move { __u64 dst, src, len, mode; __s64 move; };
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#define UFFD_FEATURE_MOVE (1 << 16)
#endif
#define MOVE_DONTWAKE 1
#define PIDFD_SELF -10000

#define PG 4096L
#define N 32768L          // region pages (128 MiB)
#define RUN 16            // pages per fault (runs) and per eviction batch
#define POOL (2 * RUN)    // pool pages of the move way

enum pattern { RANDOM, RUNS };
enum way { COPY, MOVE, MOVE_WP };
static const char *way_name[] = {"copy + madvise", "move, no write-protect", "move + write-protect"};

static int uffd, way, pattern;
static char *region, *remote, *bounce, *pool;
static long resident[N], nres, budget, unit; // resident units (pages or runs)
static long pool_full[POOL], nfull, pool_empty[POOL], nempty; // pool slots (of `unit` pages)
static volatile long faults;
static unsigned long long rng = 88172645463325252ull;

static unsigned long next_random(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return rng;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void move_pages(char *dst, char *src, long len) {
    struct uffdio_move m = {.dst = (unsigned long)dst, .src = (unsigned long)src, .len = len, .mode = MOVE_DONTWAKE};
    if (ioctl(uffd, UFFDIO_MOVE, &m)) die("UFFDIO_MOVE");
}

static long take_victim(void) {
    long i = next_random() % nres, u = resident[i];
    resident[i] = resident[--nres];
    return u;
}

static void evict(void) {
    if (way == COPY) {
        struct iovec v[RUN];
        int n = pattern == RANDOM ? RUN : 1; // 16 single pages, or one run of 16
        for (int i = 0; i < n; i++) {
            long u = take_victim();
            if (pattern == RUNS && u >= N / RUN / 2) memcpy(remote + u * unit * PG, region + u * unit * PG, unit * PG);
            v[i] = (struct iovec){region + u * unit * PG, unit * PG};
        }
        if (syscall(SYS_process_madvise, PIDFD_SELF, v, n, MADV_DONTNEED, 0) < 0) die("process_madvise");
        return;
    }
    long u = take_victim(), slot = pool_empty[--nempty];
    if (pattern == RUNS && u >= N / RUN / 2) memcpy(remote + u * unit * PG, region + u * unit * PG, unit * PG);
    move_pages(pool + slot * unit * PG, region + u * unit * PG, unit * PG);
    pool_full[nfull++] = slot;
}

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)sig, (void)context;
    long u = ((char *)info->si_addr - region) / PG / unit;
    char *dst = region + u * unit * PG, *from = remote + u * unit * PG;
    int writable = pattern == RUNS && u >= N / RUN / 2; // SAXPY's y
    faults++;
    if (nres >= budget || (way != COPY && nfull == 0)) evict();
    if (way == COPY) {
        memcpy(bounce, from, unit * PG); // the fetch
        struct uffdio_copy c = {.dst = (unsigned long)dst, .src = (unsigned long)bounce, .len = unit * PG,
                                .mode = writable ? 0 : UFFDIO_COPY_MODE_WP};
        if (ioctl(uffd, UFFDIO_COPY, &c)) die("UFFDIO_COPY");
    } else {
        long slot = pool_full[--nfull];
        char *page = pool + slot * unit * PG;
        memcpy(page, from, unit * PG); // the fetch, into the recycled page
        move_pages(dst, page, unit * PG);
        pool_empty[nempty++] = slot;
        if (way == MOVE_WP && !writable) {
            struct uffdio_writeprotect w = {.range = {(unsigned long)dst, unit * PG}, .mode = UFFDIO_WRITEPROTECT_MODE_WP};
            if (ioctl(uffd, UFFDIO_WRITEPROTECT, &w)) die("UFFDIO_WRITEPROTECT");
        }
    }
    resident[nres++] = u;
}

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void register_range(char *start, long len, long mode) {
    struct uffdio_register r = {.range = {(unsigned long)start, len}, .mode = mode};
    if (ioctl(uffd, UFFDIO_REGISTER, &r)) die("UFFDIO_REGISTER");
}

// One measurement: microseconds per fault (random) or per page (runs).
static double measure(enum pattern p, enum way w) {
    pattern = p, way = w, nres = 0, nfull = 0, nempty = 0, faults = 0;
    unit = p == RANDOM ? 1 : RUN;
    budget = N / unit / 2 - POOL / unit; // the pool's pages count against the budget
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    struct uffdio_api api = {.api = UFFD_API, .features = UFFD_FEATURE_SIGBUS | UFFD_FEATURE_MOVE | UFFD_FEATURE_PAGEFAULT_FLAG_WP};
    if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) die("userfaultfd with UFFD_FEATURE_MOVE (Linux 6.8+)");
    region = mmap(NULL, N * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(region, N * PG, MADV_NOHUGEPAGE); // UFFDIO_MOVE moves 4 KiB pages only
    register_range(region, N * PG, UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP);
    pool = mmap(NULL, POOL * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    madvise(pool, POOL * PG, MADV_NOHUGEPAGE);
    memset(pool, 1, POOL * PG); // the pool's pages exist before it is registered
    register_range(pool, POOL * PG, UFFDIO_REGISTER_MODE_MISSING); // a move's destination must be
    for (long s = 0; s < POOL / unit; s++) pool_full[nfull++] = s;
    volatile long sum = 0;
    double start, us;
    long counted;
    if (p == RANDOM) {
        for (long i = 0; i < N; i++) sum += region[(next_random() % N) * PG]; // to the steady state
        long f0 = faults;
        start = now_us();
        for (long i = 0; i < 200000; i++) sum += region[(next_random() % N) * PG + 64];
        us = now_us() - start, counted = faults - f0;
    } else {
        float *x = (float *)region, *y = (float *)(region + N / 2 * PG);
        long n = N / 2 * PG / sizeof(float);
        for (long i = 0; i < n; i++) y[i] += 0.5f * x[i]; // to the steady state
        long f0 = faults;
        start = now_us();
        for (int pass = 0; pass < 3; pass++)
            for (long i = 0; i < n; i++) y[i] += 0.5f * x[i];
        us = now_us() - start, counted = (faults - f0) * RUN;
    }
    munmap(region, N * PG), munmap(pool, POOL * PG), close(uffd);
    return us / counted;
}

int main(void) {
    remote = aligned_alloc(PG, N * PG);
    memset(remote, 0, N * PG);
    bounce = aligned_alloc(PG, RUN * PG);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_sigbus, sa.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &sa, NULL);
    for (int p = RANDOM; p <= RUNS; p++) {
        printf("%s\n", p == RANDOM ? "random single pages (us/miss):" : "SAXPY, runs of 16 pages (us/page):");
        for (int round = 0; round < 5; round++) {
            for (int w = COPY; w <= MOVE_WP; w++) {
                if (p == RUNS && w == MOVE) continue; // x must stay write-protected
                printf("  %s %.2f", way_name[w], measure(p, w));
            }
            printf("\n");
        }
    }
    return 0;
}
