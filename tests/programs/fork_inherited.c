/* A parent that holds blocks when it forks, a child that frees most of them
 * and allocates its own, and a grandchild that frees the rest: each
 * process's heap totals must follow what it inherited and what it did. */
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "mark.h"

#define INHERITED 200
#define INHERITED_SIZE 10000
#define OWN 30
#define OWN_SIZE 3000

void *inherited[INHERITED];
void *own[OWN];
void *volatile sink;

static int wait_for(pid_t child) {
    int status = 0;
    return waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int main(void) {
    mark_epoch(0); /* resolves tracer_mark before anything is counted */
    for (int i = 0; i < INHERITED; i++) inherited[i] = malloc(INHERITED_SIZE);
    mark_epoch(1);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < 150; i++) free(inherited[i]);
        for (int i = 0; i < OWN; i++) own[i] = malloc(OWN_SIZE);
        mark_epoch(2);
        pid_t grandchild = fork();
        if (grandchild == 0) {
            for (int i = 150; i < INHERITED; i++) free(inherited[i]);
            for (int i = 0; i < 10; i++) free(own[i]);
            for (int i = 0; i < 5; i++) sink = malloc(1000);
            mark_epoch(3);
            _exit(0);
        }
        _exit(wait_for(grandchild) ? 0 : 1);
    }
    int ok = wait_for(child);
    mark_epoch(2);
    return ok ? 0 : 1;
}
