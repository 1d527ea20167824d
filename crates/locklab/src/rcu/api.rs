//! The calls every flavour's domain has in the same form (polled grace periods, callbacks and their
//! barrier, the counters), written once: `grace_period_api!` implements them on a domain that
//! implements the callback engine's `Host` (its grace periods and its rule on who may wait).

/// Implements the shared calls on `$domain`: `$call` and `$barrier` are the flavour's names for
/// `call_rcu` and the barrier, `$refuse` the domain's check that the caller may wait for a grace
/// period (it panics with the call's name where it would wait for itself).
macro_rules! grace_period_api {
    ($domain:ident, $call:ident, $barrier:ident, $refuse:ident) => {
        impl $domain {
            /// A cookie naming the first grace period that starts after this call (the kernel's
            /// `get_state_synchronize_rcu`). Starts nothing: pass it to `poll_state_synchronize`
            /// or `cond_synchronize`.
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// let c = D.get_state_synchronize();
            /// assert!(!D.poll_state_synchronize(c));
            /// D.cond_synchronize(c); // runs (or shares) the grace period it names
            /// assert!(D.poll_state_synchronize(c), "a full grace period has passed since");
            /// ```
            pub fn get_state_synchronize(&'static self) -> $crate::rcu::GpCookie {
                $crate::rcu::GpCookie::new(
                    $crate::rcu::callback::Host::gp(self).snap(),
                    self as *const Self as usize,
                )
            }

            /// Like `get_state_synchronize`, and makes sure that grace period runs (the domain's
            /// grace-period thread starts it): polling the cookie eventually succeeds without anyone
            /// calling `synchronize` (the kernel's `start_poll_synchronize_rcu`).
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// let c = D.start_poll_synchronize();
            /// # #[cfg(not(miri))]
            /// while !D.poll_state_synchronize(c) {
            ///     std::thread::sleep(std::time::Duration::from_millis(1));
            /// }
            /// ```
            pub fn start_poll_synchronize(&'static self) -> $crate::rcu::GpCookie {
                let c = self.get_state_synchronize();
                $crate::rcu::callback::Host::fork_hooks(self);
                $crate::rcu::callback::request(self, c.seq);
                c
            }

            /// Whether a full grace period has passed since `cookie` was taken: every read-side
            /// section that began before then has ended, and its accesses happen-before the caller's
            /// next ones (the kernel's `poll_state_synchronize_rcu`). Never blocks. Panics if
            /// `cookie` came from another domain.
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// let c = D.get_state_synchronize();
            /// D.synchronize();
            /// assert!(D.poll_state_synchronize(c));
            /// ```
            pub fn poll_state_synchronize(&'static self, cookie: $crate::rcu::GpCookie) -> bool {
                $crate::rcu::callback::Host::gp(self).done(cookie.check(self as *const Self as usize))
            }

            /// Waits for the grace period named by `cookie` unless it has already ended (the
            /// kernel's `cond_synchronize_rcu`). Where it would wait, it panics like `synchronize`
            /// when the caller could not wait for a grace period (it would wait for itself); it
            /// panics for a cookie of another domain.
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// let c = D.get_state_synchronize();
            /// D.cond_synchronize(c); // runs (or shares) the grace period
            /// D.cond_synchronize(c); // returns at once
            /// ```
            pub fn cond_synchronize(&'static self, cookie: $crate::rcu::GpCookie) {
                let seq = cookie.check(self as *const Self as usize);
                if $crate::rcu::callback::Host::gp(self).done(seq) {
                    return;
                }
                self.$refuse("cond_synchronize");
                $crate::rcu::callback::Host::fork_hooks(self);
                $crate::rcu::callback::Host::run_gp_until(self, seq);
            }

            /// Queues `f` to run after a grace period of this domain, on the domain's grace-period
            /// thread (the kernel's `call_rcu`/`call_srcu`). The common path touches only the calling
            /// thread's own list: it scales with threads. Allowed anywhere: past
            /// [`LIMIT`]($crate::rcu::LIMIT) pending callbacks on this thread it waits for them to
            /// drain, except where that would wait for the caller itself (inside a read-side section
            /// of this domain, on an online registered QSBR thread of it, in a callback): there the
            /// list grows, bounded by `LIMIT` plus what the thread queues meanwhile.
            ///
            /// ```
            /// use std::sync::atomic::{AtomicBool, Ordering};
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// static RAN: AtomicBool = AtomicBool::new(false);
            #[doc = concat!("D.", stringify!($call), "(|| RAN.store(true, Ordering::SeqCst));")]
            #[doc = concat!("D.", stringify!($barrier), "();")]
            /// assert!(RAN.load(Ordering::SeqCst));
            /// ```
            pub fn $call(&'static self, f: impl FnOnce() + Send + 'static) {
                $crate::rcu::callback::enqueue(
                    self,
                    $crate::rcu::protocol::Callback::Closure(Box::new(f)),
                );
            }

            /// Drops `value` after a grace period of this domain (the kernel's `kfree_rcu`): like
            /// a callback that drops it, without allocating the callback.
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// D.defer_drop(Box::new(vec![1, 2, 3]));
            #[doc = concat!("D.", stringify!($barrier), "();")]
            /// assert_eq!(D.pending_callbacks(), 0);
            /// ```
            pub fn defer_drop<T: Send + 'static>(&'static self, value: Box<T>) {
                $crate::rcu::callback::enqueue(self, $crate::rcu::callback::drop_callback(value));
            }

            /// Waits until every callback queued on this domain (on any thread) before the call has
            /// run. Panics where it would wait for itself: where the caller could not wait for a
            /// grace period, or inside one of this domain's callbacks.
            ///
            /// ```
            /// use std::sync::atomic::{AtomicUsize, Ordering};
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// static N: AtomicUsize = AtomicUsize::new(0);
            /// for _ in 0..10 {
            #[doc = concat!("    D.", stringify!($call), "(|| { N.fetch_add(1, Ordering::SeqCst); });")]
            /// }
            #[doc = concat!("D.", stringify!($barrier), "();")]
            /// assert_eq!(N.load(Ordering::SeqCst), 10);
            /// ```
            #[cfg_attr(feature = "lockdep", track_caller)]
            pub fn $barrier(&'static self) {
                $crate::dep::rcu(self as *const Self as *const (), $crate::dep::M::Write, true);
                $crate::rcu::callback::Host::fork_hooks(self);
                $crate::rcu::callback::barrier(self);
            }

            /// Callbacks queued and not yet invoked, over every thread's list.
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            /// assert_eq!(D.pending_callbacks(), 0);
            /// ```
            pub fn pending_callbacks(&self) -> usize {
                $crate::rcu::callback::Host::engine(self).pending()
            }

            /// Callbacks invoked so far.
            ///
            /// ```
            #[doc = concat!("static D: locklab::rcu::", stringify!($domain), " = locklab::rcu::", stringify!($domain), "::new();")]
            #[doc = concat!("D.", stringify!($call), "(|| {});")]
            #[doc = concat!("D.", stringify!($barrier), "();")]
            /// assert_eq!(D.callbacks_invoked(), 1);
            /// ```
            pub fn callbacks_invoked(&self) -> u64 {
                $crate::rcu::callback::Host::engine(self).invoked()
            }
        }
    };
}

pub(super) use grace_period_api;
