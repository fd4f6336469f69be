// Synced commits beside O_DIRECT reads or writes of large files, at a chosen I/O priority (issue 23,
// docs/bench/journal/isolation.md, "Bulk extent I/O in the idle class"). A paced loop appends 64 KiB to a file and fdatasyncs it (a stand-in for a
// write-ahead log commit), RATE times a second, each commit timed from when it was due; beside it DEPTH threads
// each read or write 60 MiB files in IO_KIB requests with O_DIRECT (as a large put's extent file is written, or a
// large get's read), in DIR /root/rwexp (made and removed). The bulk threads run at I/O priority PRIO, the raw
// ioprio value (0: the thread's own; 24576: the idle class, 3 << 13; 16391: best effort, level 7).
//
//   gcc -O2 -o commit-beside-direct-io commit-beside-direct-io.c -lpthread
//   ./commit-beside-direct-io MODE DEPTH SECONDS [IO_KIB=1024] [RATE=400] [PRIO=0]
//     MODE w: write new 60 MiB files (posix_fallocate, then fdatasync each); r: read one 60 MiB file again and
//     again; rw: each thread alternates.
//
// Prints the bulk threads' MiB/s and the commits' latency percentiles in ms. A commit slower than 1/RATE makes the
// loop fall behind, and the latency from when each commit was due then grows over the run: use a RATE the device
// sustains (50) to see one commit's time.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MIB (1L << 20)
#define FILE_BYTES (60 * MIB)
#define DIR "/root/rwexp"

static volatile int stop;
static long moved_mib;
static const char *mode;
static long io_bytes;
static int bulk_prio;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *bulk(void *arg) {
    long id = (long)arg;
    if (bulk_prio && syscall(SYS_ioprio_set, 1, 0, bulk_prio) != 0) {
        perror("ioprio_set");
        exit(1);
    }
    char *buf;
    if (posix_memalign((void **)&buf, 4096, io_bytes) != 0) exit(1);
    memset(buf, (int)id + 1, io_bytes);
    char path[64];
    for (long i = 0; !stop; i++) {
        int write_now = !strcmp(mode, "w") || (!strcmp(mode, "rw") && i % 2 == 0);
        if (write_now) {
            snprintf(path, sizeof path, DIR "/w%ld", id);
            int fd = open(path, O_CREAT | O_WRONLY | O_DIRECT, 0644);
            posix_fallocate(fd, 0, FILE_BYTES);
            for (long k = 0; k < FILE_BYTES / io_bytes && !stop; k++)
                if (pwrite(fd, buf, io_bytes, k * io_bytes) != io_bytes) exit(2);
            fdatasync(fd);
            close(fd);
        } else {
            int fd = open(DIR "/r", O_RDONLY | O_DIRECT);
            for (long k = 0; k < FILE_BYTES / io_bytes && !stop; k++)
                if (pread(fd, buf, io_bytes, k * io_bytes) != io_bytes) exit(3);
            close(fd);
        }
        __sync_fetch_and_add(&moved_mib, 60);
    }
    free(buf);
    return 0;
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODE DEPTH SECONDS [IO_KIB] [RATE] [PRIO]\n", argv[0]);
        return 1;
    }
    mode = argv[1];
    int depth = atoi(argv[2]);
    double seconds = atof(argv[3]);
    io_bytes = (argc > 4 ? atol(argv[4]) : 1024) * 1024;
    double rate = argc > 5 ? atof(argv[5]) : 400;
    bulk_prio = argc > 6 ? atoi(argv[6]) : 0;
    if (depth > 64 || (FILE_BYTES % io_bytes) != 0) {
        fprintf(stderr, "DEPTH at most 64, IO_KIB a divisor of 61440\n");
        return 1;
    }
    mkdir(DIR, 0755);
    char *block;
    if (posix_memalign((void **)&block, 4096, MIB) != 0) return 1;
    memset(block, 7, MIB);
    int fd = open(DIR "/r", O_CREAT | O_WRONLY | O_DIRECT, 0644);
    for (int k = 0; k < 60; k++)
        if (pwrite(fd, block, MIB, k * MIB) != MIB) return 2;
    fsync(fd);
    close(fd);

    pthread_t threads[64];
    for (long j = 0; j < depth; j++) pthread_create(&threads[j], 0, bulk, (void *)j);
    int log = open(DIR "/log", O_CREAT | O_WRONLY | O_APPEND, 0644);
    char *record = malloc(64 << 10);
    memset(record, 3, 64 << 10);
    int n = 0, cap = (int)(seconds * rate) + 16;
    double *latency = malloc(cap * sizeof(double));
    double start = now(), due = start;
    while (now() < start + seconds && n < cap) {
        due += 1 / rate;
        double wait = due - now();
        if (wait > 0) usleep((useconds_t)(wait * 1e6));
        if (write(log, record, 64 << 10) != 64 << 10) return 2;
        fdatasync(log);
        latency[n++] = now() - due;
    }
    stop = 1;
    for (int j = 0; j < depth; j++) pthread_join(threads[j], 0);
    qsort(latency, n, sizeof(double), by_value);
    printf("%s depth %d io %ld KiB prio %d: %.0f MiB/s; commit ms p50 %.1f p99 %.1f p99.9 %.1f max %.0f\n", mode,
           depth, io_bytes >> 10, bulk_prio, moved_mib / seconds, latency[n / 2] * 1e3, latency[(int)(n * .99)] * 1e3,
           latency[(int)(n * .999)] * 1e3, latency[n - 1] * 1e3);
    return system("rm -rf " DIR) == 0 ? 0 : 1;
}
