/* A child forked during its parent's warm-up has a warm-up of its own: it
 * samples until its own first epoch closes, and closing it leaves the
 * parent's warm-up alone. The child marks its epoch first, then the parent
 * marks its own; then the child keeps blocks, every one recorded. */
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
    int ready[2], go[2];
    char byte;
    if (pipe(ready) != 0 || pipe(go) != 0) return 1;
    pid_t child = fork();
    if (child < 0) return 1;
    if (child == 0) {
        close(ready[0]);
        close(go[1]);
        mark_epoch(0); /* ends the child's warm-up */
        if (write(ready[1], "x", 1) != 1) _exit(1);
        if (read(go[0], &byte, 1) != 1) _exit(1);
        keep_blocks();
        exit(0); /* the child's trace is written at its exit */
    }
    close(ready[1]);
    close(go[0]);
    if (read(ready[0], &byte, 1) != 1) return 1;
    mark_epoch(0); /* ends the parent's warm-up */
    if (write(go[1], "x", 1) != 1) return 1;
    int status = 0;
    if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 1;
    mark_epoch(1);
    printf("fork_in_warm_up: done\n");
    return 0;
}
