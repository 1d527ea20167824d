//! `locklab list`: every lock and workload, one a line: name, kind, summary (and the workloads a lock
//! runs, or why it is unavailable in this build).

use crate::engine::workload::Workload;
use crate::locks;

/// Prints the list.
pub fn command() {
    for l in locks::registry() {
        let mut runs: Vec<&str> = Workload::ALL
            .iter()
            .filter(|w| l.supports(**w))
            .map(|w| w.name())
            .collect();
        runs.sort_unstable();
        let runs = match l.unavailable {
            Some(u) => format!("unavailable: {}", u.why),
            None => runs.join(","),
        };
        println!("{:<26}{:<10}{}  [{runs}]", l.name, l.kind.name(), l.summary);
    }
    for w in Workload::ALL {
        println!("{:<26}{:<10}{}", w.name(), "load", w.summary());
    }
}
