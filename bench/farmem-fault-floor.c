// The floor of a 4 KiB userfaultfd page fault on this machine, without nam: how much of a
// remote fault (`nam-bench farmem --workload fault-latency`) the kernel's fault delivery and
// page installation cost alone. The "fetch" is a copy from a hot local buffer.
//
//   gcc -O2 -o /tmp/fault-floor bench/farmem-fault-floor.c -lpthread
//   /tmp/fault-floor            # every fault mode x install method; prints medians
//
// Fault modes: `signal` (UFFD_FEATURE_SIGBUS, the faulting thread installs the page in its
// SIGBUS handler; also split into delivery, handler body and return) and `thread` (a
// handler thread busy-polls the descriptor and installs the page, waking the faulting
// thread). Install methods: `copy` (UFFDIO_COPY from the buffer into an anonymous mapping:
// what the pager does), `continue` (memcpy into a memfd page already in the page cache
// through a second mapping, then UFFDIO_CONTINUE: a minor fault), `move` (memcpy into a
// pre-faulted staging page, then UFFDIO_MOVE, Linux 6.8+).
#define _GNU_SOURCE
#include <linux/userfaultfd.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#ifndef UFFDIO_MOVE
struct uffdio_move { __u64 dst, src, len, mode; __s64 move; };
#define UFFDIO_MOVE _IOWR(UFFDIO, 0x05, struct uffdio_move)
#define UFFD_FEATURE_MOVE (1 << 16)
#endif

#define PAGES 4096
#define PG 4096L
#define SRC_PAGES 64

enum method { COPY, CONTINUE, MOVE };
static const char *method_name[] = {"copy", "continue", "move"};

static int uffd, method, stage_next;
static char *region, *src, *alias, *stage;
static atomic_int stop;
static double t_enter, t_leave, in_delivery[PAGES], in_body[PAGES], in_return[PAGES];

static double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static void serve(unsigned long addr, int wake) {
    unsigned long page = addr & ~(PG - 1);
    unsigned long off = page - (unsigned long)region;
    char *from = src + off % (SRC_PAGES * PG);
    int rc;
    if (method == COPY) {
        struct uffdio_copy c = {.dst = page, .src = (unsigned long)from, .len = PG, .mode = wake ? 0 : UFFDIO_COPY_MODE_DONTWAKE};
        rc = ioctl(uffd, UFFDIO_COPY, &c);
    } else if (method == CONTINUE) {
        memcpy(alias + off, from, PG);
        struct uffdio_continue c = {.range = {page, PG}, .mode = wake ? 0 : UFFDIO_CONTINUE_MODE_DONTWAKE};
        rc = ioctl(uffd, UFFDIO_CONTINUE, &c);
    } else {
        char *s = stage + (stage_next++) * PG;
        memcpy(s, from, PG);
        struct uffdio_move m = {.dst = page, .src = (unsigned long)s, .len = PG, .mode = wake ? 0 : 1};
        rc = ioctl(uffd, UFFDIO_MOVE, &m);
    }
    if (rc) {
        perror(method_name[method]);
        exit(1);
    }
}

static void on_sigbus(int sig, siginfo_t *info, void *context) {
    (void)sig, (void)context;
    t_enter = now_us();
    serve((unsigned long)info->si_addr, 0);
    t_leave = now_us();
}

static void *handler(void *arg) {
    (void)arg;
    struct uffd_msg m[16];
    while (!stop) {
        ssize_t n = read(uffd, m, sizeof m);
        for (int i = 0; n > 0 && i < n / (int)sizeof m[0]; i++) serve(m[i].arg.pagefault.address, 1);
    }
    return NULL;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v) {
    qsort(v, PAGES, sizeof v[0], cmp);
    return v[PAGES / 2];
}

static void run(int signal_mode, int how) {
    method = how;
    stage_next = 0;
    stop = 0;
    uffd = syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
    unsigned long features = (signal_mode ? UFFD_FEATURE_SIGBUS : 0) | (how == CONTINUE ? UFFD_FEATURE_MINOR_SHMEM : 0) |
                             (how == MOVE ? UFFD_FEATURE_MOVE : 0);
    struct uffdio_api api = {.api = UFFD_API, .features = features};
    if (uffd < 0) {
        perror("userfaultfd");
        exit(1);
    }
    if (ioctl(uffd, UFFDIO_API, &api)) { // a feature this kernel lacks (UFFDIO_MOVE before 6.8)
        printf("%-6s %-8s not supported by this kernel\n", signal_mode ? "signal" : "thread", method_name[how]);
        close(uffd);
        return;
    }
    int memfd = -1;
    if (how == CONTINUE) {
        memfd = memfd_create("floor", MFD_CLOEXEC);
        if (ftruncate(memfd, PAGES * PG)) exit(1);
        region = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        alias = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
        memset(alias, 0, PAGES * PG); // every page in the page cache: the faults are minor
    } else {
        region = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    }
    if (how == MOVE)
        stage = mmap(NULL, PAGES * PG, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    struct uffdio_register r = {.range = {(unsigned long)region, PAGES * PG},
                                .mode = how == CONTINUE ? UFFDIO_REGISTER_MODE_MINOR : UFFDIO_REGISTER_MODE_MISSING};
    if (ioctl(uffd, UFFDIO_REGISTER, &r)) {
        perror("UFFDIO_REGISTER");
        exit(1);
    }
    pthread_t thread;
    if (!signal_mode) pthread_create(&thread, NULL, handler, NULL);
    static double total[PAGES];
    for (int i = 0; i < PAGES; i++) {
        long p = (i * 2654435761u) % PAGES; // every page once, scattered
        double start = now_us();
        volatile char c = region[p * PG + 8];
        (void)c;
        double end = now_us();
        total[i] = end - start;
        if (signal_mode) {
            in_delivery[i] = t_enter - start;
            in_body[i] = t_leave - t_enter;
            in_return[i] = end - t_leave;
        }
    }
    stop = 1;
    if (!signal_mode) pthread_join(thread, NULL);
    printf("%-6s %-8s fault median %6.2f us", signal_mode ? "signal" : "thread", method_name[how], median(total));
    if (signal_mode)
        printf("  (delivery %.2f, handler %.2f, return %.2f)", median(in_delivery), median(in_body), median(in_return));
    printf("\n");
    munmap(region, PAGES * PG);
    if (how == CONTINUE) munmap(alias, PAGES * PG), close(memfd);
    if (how == MOVE) munmap(stage, PAGES * PG);
    close(uffd);
}

int main(void) {
    src = aligned_alloc(PG, SRC_PAGES * PG);
    memset(src, 7, SRC_PAGES * PG);
    struct sigaction sa = {0};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGBUS, &sa, NULL);
    for (int signal_mode = 1; signal_mode >= 0; signal_mode--)
        for (int how = COPY; how <= MOVE; how++) run(signal_mode, how);
    return 0;
}
