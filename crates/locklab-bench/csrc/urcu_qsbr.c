/*
 * The lab's shim over liburcu's QSBR flavour (the `liburcu-qsbr` rows of `rcu-read`).
 *
 * locklab's own code, compiled with liburcu's inline fast paths (_LGPL_SOURCE) and linked dynamically
 * against the LGPL library (see urcu_memb.c). QSBR's read lock and unlock are empty, so the lab does
 * not call them: a reader registers once (ll_qsbr_register) and announces a quiescent state now and
 * then (ll_qsbr_quiescent_state), as a C program using liburcu-qsbr would. A registered thread is
 * unregistered when it exits (a pthread key destructor).
 */
#define _LGPL_SOURCE
#include <urcu-qsbr.h>
#include <pthread.h>

static __thread int registered;
static pthread_key_t exit_key;
static pthread_once_t exit_key_once = PTHREAD_ONCE_INIT;

static void unregister_at_exit(void *unused)
{
	(void)unused;
	if (registered) {
		urcu_qsbr_unregister_thread();
		registered = 0;
	}
}

static void make_exit_key(void)
{
	pthread_key_create(&exit_key, unregister_at_exit);
}

void ll_qsbr_register(void)
{
	if (!registered) {
		pthread_once(&exit_key_once, make_exit_key);
		urcu_qsbr_register_thread();
		registered = 1;
		pthread_setspecific(exit_key, &registered);
	}
}

void ll_qsbr_quiescent_state(void)
{
	urcu_qsbr_quiescent_state();
}
