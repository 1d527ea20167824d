/* The plugin of plugin_host.c: its own mutex, locked through whatever pthread_mutex_lock it binds. */
#include <pthread.h>

static pthread_mutex_t own = PTHREAD_MUTEX_INITIALIZER;
static int calls;

int plug_call(void) {
  pthread_mutex_lock(&own);
  int n = ++calls;
  pthread_mutex_unlock(&own);
  return n;
}
