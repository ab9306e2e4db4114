/* A plugin that leaks its token buffers into the list its host keeps
 * (see swaps_plugins.c). */
#include <stdlib.h>
#include <string.h>

__attribute__((noinline)) static char *parser_token(int i) {
    char *token = malloc(1500); /* the parser's leak */
    memset(token, i, 1500);
    return token;
}

__attribute__((noinline)) void parser_run(void *(*keep)(void *)) {
    for (int i = 0; i < 20; i++) keep(parser_token(i));
}
