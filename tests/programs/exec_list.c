/* Replaces itself through one of glibc's list forms of exec, which call
 * execve inside glibc: `l` (execl, with arguments past the five that go in
 * registers), `lp` (execlp, found on PATH) or `le` (execle, with an
 * environment of its own). The new image prints what it was given. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *volatile sink;

int main(int argc, char **argv) {
    if (argc > 1 && strcmp(argv[1], "image") == 0) {
        const char *extra = getenv("EXTRA");
        printf("new image:");
        for (int i = 2; i < argc; i++) printf(" %s", argv[i]);
        printf(" EXTRA=%s\n", extra ? extra : "-");
        return 0;
    }
    for (int i = 0; i < 100; i++) sink = malloc(5000); /* kept until exec */
    fflush(stdout);
    const char *form = argc > 1 ? argv[1] : "";
    if (strcmp(form, "l") == 0) {
        execl(argv[0], "exec_list", "image", "a", "b", "c", "d", "e", "f", "g", (char *)NULL);
    } else if (strcmp(form, "lp") == 0) {
        /* By name alone, found through PATH: this program's folder. */
        char *name = strrchr(argv[0], '/');
        if (name) {
            *name++ = '\0';
            setenv("PATH", argv[0], 1);
        } else {
            name = argv[0];
        }
        execlp(name, "exec_list", "image", "p", (char *)NULL);
    } else if (strcmp(form, "le") == 0) {
        char *env[] = {"EXTRA=yes", NULL};
        execle(argv[0], "exec_list", "image", "1", "2", "3", "4", "5", "6", (char *)NULL, env);
    }
    perror("exec");
    return 1;
}
