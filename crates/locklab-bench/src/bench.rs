//! `locklab bench`: one plan (workloads x locks x thread counts) run side by side, with the table, the
//! summary and the exports (the shared `suite` runs it).

use crate::plan::Plan;
use crate::runner::SystemClock;

/// Runs the plan on the system clock.
pub fn command(plan: &Plan) -> anyhow::Result<()> {
    crate::suite::run(plan, &SystemClock::default())?;
    Ok(())
}
