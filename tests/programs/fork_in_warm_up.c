/* A child forked during the warm-up, as a persistent DataLoader worker is
 * forked during the first pass: once the parent's first epoch has closed,
 * every block the child allocates is recorded, as in the parent. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "mark.h"

#define KEPT 100
#define KEPT_SIZE 7777

void *kept[KEPT];

__attribute__((noinline)) static void keep_blocks(void) {
    for (int i = 0; i < KEPT; i++) kept[i] = malloc(KEPT_SIZE);
}

int main(void) {
    int go[2];
    if (pipe(go) != 0) return 1;
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        char byte;
        close(go[1]);
        if (read(go[0], &byte, 1) != 1) _exit(1);
        keep_blocks();
        exit(0); /* the child's trace is written at its exit */
    }
    close(go[0]);
    mark_epoch(0); /* ends the warm-up */
    if (write(go[1], "x", 1) != 1) return 1;
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    mark_epoch(1);
    printf("fork_in_warm_up: done\n");
    return 0;
}
