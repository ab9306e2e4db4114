#define PLUGIN_LEAK second_plugin_leak
#include "replaced_plugin.h"
