//! The simulated machine's description: what it is, its topology and its costs. Plain data that
//! builds everywhere, not only under `--cfg locklab_sim`: the lab reads machine files into it and
//! sends it to the simulator, which runs it. With the `serde` feature it is (de)serialisable under
//! the field names of the lab's machine files (every field required but `source`, none unknown).

/// A machine description: what it is, its topology and its costs, in nanoseconds.
///
/// ```
/// let m = locklab::sim::Machine::example();
/// assert!(m.validate().is_ok());
/// assert_eq!(m.cores(), 4);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(deny_unknown_fields)
)]
pub struct Machine {
    /// Short name (the lab's `predict --machine` accepts it for the descriptions it ships).
    pub name: String,
    /// One line: what machine this is.
    pub what: String,
    /// Where the figures come from.
    #[cfg_attr(feature = "serde", serde(default))]
    pub source: String,
    /// Sockets.
    pub sockets: usize,
    /// NUMA nodes (dies) per socket.
    pub nodes_per_socket: usize,
    /// Cores per node.
    pub cores_per_node: usize,
    /// A load or store that hits in the core's own cache.
    pub hit_ns: f64,
    /// An atomic read-modify-write (or SeqCst store) on a line the core owns.
    pub rmw_ns: f64,
    /// A full fence.
    pub fence_ns: f64,
    /// One `pause` (spin-loop hint) with the loop around it.
    pub pause_ns: f64,
    /// A line transfer between two cores of one node.
    pub line_node_ns: f64,
    /// A line transfer between nodes of one socket.
    pub line_socket_ns: f64,
    /// A line transfer between sockets (the mean over the sockets' distances).
    pub line_remote_ns: f64,
    /// A line transfer between the two sockets farthest apart: what a probe broadcast to every
    /// node waits for (machines of more than one socket).
    pub line_farthest_ns: f64,
    /// A line nobody caches, from memory.
    pub memory_ns: f64,
    /// The share of a transaction's latency during which the line's home serves no other request
    /// for that line (1: the home holds later requests until the requester reports the transaction
    /// done, as AMD's HyperTransport protocol and directory protocols do).
    pub occupancy: f64,
    /// Whether the home knows which cores hold a line (a probe filter or directory). Without one,
    /// every miss and every write to a shared line probes every node and completes when the
    /// farthest has answered. With one, a miss probes only the owner; a write to a line two or more
    /// other cores share still probes every node (AMD's probe filter keeps no set of sharers).
    pub probe_filter: bool,
    /// A system call that does little (a futex wait that sleeps, before it sleeps).
    pub syscall_ns: f64,
    /// The waker's cost of a futex wake that wakes someone.
    pub futex_wake_ns: f64,
    /// From a futex wake until the woken thread runs (on an idle core).
    pub wakeup_ns: f64,
    /// A context switch between two threads of one core.
    pub ctx_switch_ns: f64,
    /// A `sched_yield` with nobody else waiting for the core.
    pub yield_ns: f64,
    /// A reading of the clock.
    pub clock_ns: f64,
    /// The scheduler's time slice.
    pub slice_ns: f64,
}

impl Machine {
    /// A small 2-socket, 4-core machine with round numbers (documentation and tests).
    ///
    /// ```
    /// let m = locklab::sim::Machine::example();
    /// assert_eq!((m.sockets, m.cores_per_node), (2, 2));
    /// ```
    pub fn example() -> Machine {
        Machine {
            name: "example".into(),
            what: "a small 2-socket, 4-core machine with round numbers".into(),
            source: String::new(),
            sockets: 2,
            nodes_per_socket: 1,
            cores_per_node: 2,
            hit_ns: 1.0,
            rmw_ns: 8.0,
            fence_ns: 15.0,
            pause_ns: 10.0,
            line_node_ns: 50.0,
            line_socket_ns: 80.0,
            line_remote_ns: 120.0,
            line_farthest_ns: 120.0,
            memory_ns: 90.0,
            occupancy: 1.0,
            probe_filter: true,
            syscall_ns: 150.0,
            futex_wake_ns: 1_500.0,
            wakeup_ns: 4_000.0,
            ctx_switch_ns: 1_500.0,
            yield_ns: 300.0,
            clock_ns: 20.0,
            slice_ns: 3_000_000.0,
        }
    }

    /// Cores in all.
    ///
    /// ```
    /// let mut m = locklab::sim::Machine::example();
    /// m.nodes_per_socket = 3;
    /// assert_eq!(m.cores(), 2 * 3 * 2);
    /// ```
    pub fn cores(&self) -> usize {
        self.sockets
            .saturating_mul(self.nodes_per_socket)
            .saturating_mul(self.cores_per_node)
    }

    /// Checks the description: 1 to [`MAX_CORES`] cores, every cost a number from 0 to
    /// [`MAX_COST_NS`] (the slice to [`MAX_SLICE_NS`]), `occupancy` a share, a positive `pause_ns`
    /// and slice. The error is one line naming the field.
    ///
    /// ```
    /// let mut m = locklab::sim::Machine::example();
    /// m.wakeup_ns = f64::NAN;
    /// assert!(m.validate().unwrap_err().contains("wakeup_ns"));
    /// m.wakeup_ns = 1e300;
    /// assert_eq!(m.validate().unwrap_err(), "`wakeup_ns` must be a number from 0 to 1e7 (got 1e300)");
    /// ```
    pub fn validate(&self) -> Result<(), String> {
        let cores = self.cores();
        if !(1..=MAX_CORES).contains(&cores) {
            return Err(format!(
                "{cores} cores (sockets x nodes_per_socket x cores_per_node): 1 to {MAX_CORES} are supported"
            ));
        }
        for (k, v) in self.costs() {
            let max = if k == "slice_ns" {
                MAX_SLICE_NS
            } else {
                MAX_COST_NS
            };
            if !v.is_finite() || !(0.0..=max).contains(&v) {
                let got = if v.abs() >= 1e9 {
                    format!("{v:e}")
                } else {
                    format!("{v}")
                };
                return Err(format!(
                    "`{k}` must be a number from 0 to {max:e} (got {got})"
                ));
            }
        }
        if self.occupancy > 1.0 {
            return Err(format!(
                "`occupancy` is a share, 0 to 1 (got {})",
                self.occupancy
            ));
        }
        if self.pause_ns <= 0.0 || self.slice_ns <= 0.0 {
            return Err("`pause_ns` and `slice_ns` must be above 0".into());
        }
        let v = self.line_farthest_ns;
        if !v.is_finite() || v < 0.0 {
            return Err(format!(
                "`line_farthest_ns` must be a number >= 0 (got {v})"
            ));
        }
        Ok(())
    }

    /// The costs [`Machine::validate`] bounds, by field name (`line_farthest_ns` has no bound but
    /// its sign: it is checked on its own).
    fn costs(&self) -> [(&'static str, f64); 16] {
        [
            ("hit_ns", self.hit_ns),
            ("rmw_ns", self.rmw_ns),
            ("fence_ns", self.fence_ns),
            ("pause_ns", self.pause_ns),
            ("line_node_ns", self.line_node_ns),
            ("line_socket_ns", self.line_socket_ns),
            ("line_remote_ns", self.line_remote_ns),
            ("memory_ns", self.memory_ns),
            ("occupancy", self.occupancy),
            ("syscall_ns", self.syscall_ns),
            ("futex_wake_ns", self.futex_wake_ns),
            ("wakeup_ns", self.wakeup_ns),
            ("ctx_switch_ns", self.ctx_switch_ns),
            ("yield_ns", self.yield_ns),
            ("clock_ns", self.clock_ns),
            ("slice_ns", self.slice_ns),
        ]
    }

    /// The description as a machine file (TOML, what the lab's `calibrate --describe` writes and
    /// `predict --machine FILE` reads): the costs with three decimals.
    ///
    /// ```
    /// let toml = locklab::sim::Machine::example().to_toml();
    /// assert!(toml.starts_with("name = \"example\"\n"));
    /// assert!(toml.contains("\nrmw_ns = 8.000\n"));
    /// ```
    pub fn to_toml(&self) -> String {
        let mut s = format!(
            "name = {:?}\nwhat = {:?}\nsource = {:?}\n\nsockets = {}\nnodes_per_socket = {}\ncores_per_node = {}\n\n",
            self.name,
            self.what,
            self.source,
            self.sockets,
            self.nodes_per_socket,
            self.cores_per_node
        );
        for (k, v) in self.costs() {
            s += &format!("{k} = {v:.3}\n");
        }
        s += &format!("line_farthest_ns = {:.3}\n", self.line_farthest_ns);
        s += &format!("probe_filter = {}\n", self.probe_filter);
        s
    }
}

/// The most any cost of a description may be, ns (10 ms: beyond any machine's).
///
/// ```
/// let mut m = locklab::sim::Machine::example();
/// m.memory_ns = locklab::sim::machine::MAX_COST_NS * 2.0;
/// assert!(m.validate().is_err());
/// ```
pub const MAX_COST_NS: f64 = 1e7;

/// The most `slice_ns` may be, ns (1 s).
///
/// ```
/// let mut m = locklab::sim::Machine::example();
/// m.slice_ns = locklab::sim::machine::MAX_SLICE_NS;
/// assert!(m.validate().is_ok());
/// ```
pub const MAX_SLICE_NS: f64 = 1e9;

/// The most cores a machine description may have (a line's sharers are one `u128`).
///
/// ```
/// assert_eq!(locklab::sim::MAX_CORES, 128);
/// ```
pub const MAX_CORES: usize = 128;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validate_names_the_field_in_one_line() {
        let m = Machine::example();
        let bad = |f: fn(&mut Machine)| {
            let mut m = m.clone();
            f(&mut m);
            m.validate().unwrap_err()
        };
        assert_eq!(
            bad(|m| m.sockets = usize::MAX),
            format!(
                "{} cores (sockets x nodes_per_socket x cores_per_node): 1 to 128 are supported",
                usize::MAX
            )
        );
        assert_eq!(
            bad(|m| m.slice_ns = 1e12),
            "`slice_ns` must be a number from 0 to 1e9 (got 1e12)"
        );
        assert_eq!(
            bad(|m| m.pause_ns = -3.0),
            "`pause_ns` must be a number from 0 to 1e7 (got -3)"
        );
        assert_eq!(
            bad(|m| m.occupancy = 1.5),
            "`occupancy` is a share, 0 to 1 (got 1.5)"
        );
        assert_eq!(
            bad(|m| m.line_farthest_ns = f64::NAN),
            "`line_farthest_ns` must be a number >= 0 (got NaN)"
        );
        assert!(m.validate().is_ok());
    }

    #[test]
    fn to_toml_writes_every_field() {
        let toml = Machine::example().to_toml();
        for field in [
            "name",
            "what",
            "source",
            "sockets",
            "probe_filter",
            "line_farthest_ns",
            "slice_ns",
        ] {
            assert!(
                toml.contains(&format!("\n{field} = ")) || toml.starts_with(field),
                "{field}"
            );
        }
        assert_eq!(toml.lines().filter(|l| l.contains(" = ")).count(), 24);
    }
}
