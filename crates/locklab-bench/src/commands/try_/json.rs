//! `--json`: one row per choice in `apps`' schema, the prediction and the recommendation.

use super::*;

/// `--json`: one row per choice in `apps`' schema, the prediction and the recommendation.
pub(super) fn write_json(
    target: &str,
    plan: &TryPlan,
    rows: &[AppRow],
    predicted: &anyhow::Result<crate::engine::advice::Prediction>,
    recommendation: &str,
    ref_status: Option<ExitStatus>,
) -> anyhow::Result<()> {
    let higher = plan.uses_rate();
    let doc = serde_json::json!({
        "locklab_version": env!("CARGO_PKG_VERSION"),
        "machine": crate::engine::limits::machine(),
        "command": plan.cmd,
        "measure": if higher { "rate" } else { "wall time" },
        "apps": rows,
        "predicted": predicted.as_ref().ok(),
        "recommendation": recommendation,
        "glibc_status": ref_status.map(|s| status_text(&s)),
    });
    let text = serde_json::to_string_pretty(&doc)? + "\n";
    if target == "-" {
        print!("{text}");
    } else {
        std::fs::write(target, text).map_err(|e| anyhow::anyhow!("cannot write {target}: {e}"))?;
    }
    Ok(())
}
