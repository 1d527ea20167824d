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
#define LL_REGISTER() urcu_qsbr_register_thread()
#define LL_UNREGISTER() urcu_qsbr_unregister_thread()
#include "shim_register.h"

void ll_qsbr_register(void)
{
	ensure_registered();
}

void ll_qsbr_quiescent_state(void)
{
	urcu_qsbr_quiescent_state();
}
