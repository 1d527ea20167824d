//! One seed's reproduction as `reproduce --json` writes it and `report` reads it.

use serde::{Deserialize, Serialize};

/// One reproduction's result (the `reproductions` entries of `--json`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Reproduction {
    /// `004`
    pub seed: String,
    /// What the seed measured.
    pub title: String,
    /// The seed's figures and ours, in the seed's shape (see each seed's module).
    pub figures: serde_json::Value,
    /// The table as printed.
    pub table: String,
    /// `true` when every claim of the seed held here.
    pub reproduced: bool,
    /// One line: the seed's claims, our figures for each, and what differs.
    pub verdict: String,
}
