//! `locklab run -- CMD`: an unmodified program on locklab's locks (the preload runner of
//! [`crate::external::preload`]), with lock statistics and lockdep on request.

use crate::external::preload::{self, Choices, Lockdep};
use clap::Args;

/// `locklab run` options.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The algorithm for pthread mutexes and C11 mtx: mutex, mcs, ticket, qspinlock, tas, glibc, glibc-adaptive (every normal mutex on glibc's adaptive kind).
    #[arg(long, value_name = "X")]
    pub mutex: Option<String>,
    /// The algorithm for pthread rwlocks: rwsem, rwspinlock, glibc.
    #[arg(long, value_name = "Y")]
    pub rwlock: Option<String>,
    /// The algorithm for pthread spinlocks: qspinlock, ticket, tas, glibc.
    #[arg(long, value_name = "Z")]
    pub spin: Option<String>,
    /// Count every lock the program takes (per lock and call site: acquisitions, contentions,
    /// wait and hold times) and print lock_stat-style tables when it ends.
    #[arg(long)]
    pub stat: bool,
    /// Also write the statistics of every process as JSON here (`-`: standard output); implies
    /// --stat.
    #[arg(long, value_name = "F.json")]
    pub stat_out: Option<String>,
    /// Check every lock order the program uses for potential deadlocks (lockdep): `report`
    /// (the default) prints each problem on stderr when first seen and goes on; `abort` stops
    /// the program at the first.
    #[arg(long, value_name = "MODE", num_args = 0..=1, default_missing_value = "report", require_equals = true)]
    pub lockdep: Option<String>,
    /// Also write every lockdep report of every process as JSON here (`-`: standard output);
    /// implies --lockdep.
    #[arg(long, value_name = "F.json")]
    pub lockdep_out: Option<String>,
    /// The program and its arguments, after `--`.
    #[arg(
        value_name = "CMD",
        trailing_var_arg = true,
        required = true,
        allow_hyphen_values = true
    )]
    pub cmd: Vec<String>,
}

/// Runs the program: replaced by it (`exec`), or supervised when statistics or lockdep are asked for.
pub fn command(a: RunArgs) -> anyhow::Result<()> {
    let choices = Choices::parse(a.mutex, a.rwlock, a.spin)?;
    let lockdep = Lockdep::parse(a.lockdep, a.lockdep_out)?;
    let stat = a.stat || a.stat_out.is_some();
    if stat || lockdep.is_some() {
        preload::run_supervised(
            &choices,
            stat,
            a.stat_out.as_deref(),
            lockdep.as_ref(),
            &a.cmd,
        )
    } else {
        preload::run(&choices, &a.cmd)
    }
}
