//! The crossover map's prediction from glibc's lock statistics (`advise --from`), beside the
//! measurement.

use super::*;

/// The measurement of the choice the lock statistics predicted.
pub(super) fn check_prediction(p: &crate::engine::advice::Prediction, rows: &[AppRow]) {
    match rows.iter().find(|row| row.lock == p.process_choice) {
        Some(m) => println!(
            "  measured for the predicted choice {}: {:.2}x, {}{}",
            m.lock,
            m.ratio_vs_glibc,
            m.verdict,
            match m.verdict.as_str() {
                "slower" => " (the prediction and the measurement disagree)",
                _ => "",
            }
        ),
        None => println!(
            "  the predicted choice {} was not measured (add it with --locks)",
            p.process_choice
        ),
    }
}
