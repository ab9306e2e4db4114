/* Leaks from the first plugin given for six epochs and unloads it, then
 * loads the second, which the loader places where the first was, and
 * leaks from it for seven more: enough epochs for each leak to be a
 * suspect. Exits with 3 when the second plugin lands elsewhere. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <stdio.h>
#include "mark.h"

typedef void (*leak_fn)(void);

static void *load(const char *path, const char *function, leak_fn *leak) {
    void *plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        fprintf(stderr, "%s\n", dlerror());
        return NULL;
    }
    *leak = (leak_fn)dlsym(plugin, function);
    return *leak ? plugin : NULL;
}

static void *base_of(leak_fn leak) {
    Dl_info info;
    return dladdr((void *)leak, &info) ? info.dli_fbase : NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    leak_fn first_leak, second_leak;
    void *first = load(argv[1], "first_plugin_leak", &first_leak);
    if (!first) return 1;
    void *first_base = base_of(first_leak);
    for (int epoch = 0; epoch < 6; epoch++) {
        first_leak();
        mark_epoch(epoch);
    }
    if (dlclose(first) != 0) return 1;
    void *second = load(argv[2], "second_plugin_leak", &second_leak);
    if (!second) return 1;
    void *second_base = base_of(second_leak);
    if (second_base != first_base) {
        fprintf(stderr, "replaces_plugin: the second plugin was loaded at %p, not at %p where the first was\n",
                second_base, first_base);
        return 3;
    }
    for (int epoch = 6; epoch < 13; epoch++) {
        second_leak();
        mark_epoch(epoch);
    }
    printf("replaces_plugin: the second plugin took the first's addresses\n");
    return 0;
}
