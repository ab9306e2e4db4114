/* Limits its address space to what it maps now and the MiB its argument
   gives, keeps 40-byte blocks until malloc returns NULL (marking an epoch
   every 50,000), then frees them all and goes on, as a program that
   handles a failed malloc does. With "large" after the MiB it keeps 64 KiB
   blocks instead, marks no epoch, and exits with them kept: the tracer
   meets the limit at the exit's snapshot. With "small" it keeps its 40-byte
   blocks, marks no epoch and exits with them kept: recorded one by one,
   they make the tracer's table double as they come, which may find no
   room before any epoch closes. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "mark.h"

#define MOST_BLOCKS 8000000

static void *blocks[MOST_BLOCKS];

static long mapped_bytes(void) {
    long pages = 0;
    FILE *statm = fopen("/proc/self/statm", "r");
    if (!statm || fscanf(statm, "%ld", &pages) != 1) exit(2);
    fclose(statm);
    return pages * sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv) {
    if (argc != 2 && argc != 3) return 2;
    int large = argc == 3 && strcmp(argv[2], "large") == 0;
    int kept_at_exit = argc == 3 && (large || strcmp(argv[2], "small") == 0);
    long headroom = atol(argv[1]) << 20;
    struct rlimit limit;
    getrlimit(RLIMIT_AS, &limit);
    limit.rlim_cur = mapped_bytes() + headroom;
    if (setrlimit(RLIMIT_AS, &limit) != 0) return 2;
    long kept = 0;
    int failure = 0;
    while (kept < MOST_BLOCKS) {
        void *block = malloc(large ? 64 << 10 : 40);
        if (!block) {
            failure = errno;
            break;
        }
        if (large) memset(block, 1, 4096);
        blocks[kept++] = block;
        if (!kept_at_exit && kept % 50000 == 0) mark_epoch((int)(kept / 50000));
    }
    if (kept == MOST_BLOCKS) {
        puts("the limit was never reached");
        return 3;
    }
    if (failure != ENOMEM) {
        printf("malloc failed with errno %d, not ENOMEM\n", failure);
        return 4;
    }
    if (kept_at_exit) {
        puts("kept");
        return 0;
    }
    for (long i = 0; i < kept; i++) free(blocks[i]);
    puts("recovered");
    return 0;
}
