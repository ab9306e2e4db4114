/* Two children forked from the same point, as a DataLoader forks its
 * workers, each keep the same blocks; sampled, each must draw samples of
 * its own rather than repeat its sibling's (or their parent's). */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "mark.h"

#define BLOCKS 4000

void *kept[BLOCKS];

__attribute__((noinline)) static void keep_blocks(void) {
    for (int i = 0; i < BLOCKS; i++) kept[i] = malloc(500 + (i * 37) % 1000);
}

int main(void) {
    keep_blocks(); /* the parent samples first: its generator is seeded, a gap drawn */
    pid_t children[2];
    for (int c = 0; c < 2; c++) {
        children[c] = fork();
        if (children[c] < 0) return 1;
        if (children[c] == 0) {
            keep_blocks();
            mark_epoch(0);
            exit(0);
        }
    }
    for (int c = 0; c < 2; c++) {
        int status = 0;
        if (waitpid(children[c], &status, 0) != children[c] || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 1;
    }
    return 0;
}
