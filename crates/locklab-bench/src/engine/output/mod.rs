//! Output: the terminal table, and the `--json`, `--csv` and `--markdown` exporters.
//!
//! Every exporter writes the whole [`Report`] so far. File exporters rewrite their file (atomically,
//! through a temporary file) after every row, so an interrupted run keeps what it measured; exporters to
//! standard output (`-`) write once, at the end.

pub mod csv;
pub mod markdown;
pub mod programs;
pub mod reproduction;
pub mod table;

use crate::engine::metrics::{Calibration, Machine, ResultRow};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::PathBuf;

/// Everything a run produced (lab.md's JSON document). Missing fields read as empty (an `apps`
/// document has no calibration or rows).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Report {
    /// The lab's version.
    pub locklab_version: String,
    /// The machine.
    pub machine: Machine,
    /// Its physical limits.
    pub calibration: Calibration,
    /// One row per lock x workload x threads.
    pub results: Vec<ResultRow>,
}

/// An output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// lab.md's JSON schema
    Json,
    /// one column per scalar
    Csv,
    /// a GitHub table
    Markdown,
}

/// Where one format goes.
#[derive(Clone, Debug)]
pub struct Exporter {
    /// the format
    pub format: Format,
    /// a file, or `None` for standard output
    pub path: Option<PathBuf>,
}

impl Exporter {
    /// `-` means standard output.
    pub fn new(format: Format, target: &str) -> Self {
        Exporter {
            format,
            path: (target != "-").then(|| PathBuf::from(target)),
        }
    }

    /// Renders the report in this format.
    pub fn render(&self, report: &Report) -> String {
        match self.format {
            Format::Json => {
                serde_json::to_string_pretty(report).expect("a report always serialises") + "\n"
            }
            Format::Csv => csv::render(&report.results),
            Format::Markdown => markdown::render(report),
        }
    }

    /// Writes the report so far to a file target (no-op for stdout until [`finish`](Self::finish)).
    pub fn checkpoint(&self, report: &Report) -> anyhow::Result<()> {
        if let Some(path) = &self.path {
            let tmp = path.with_extension("locklab-tmp");
            std::fs::write(&tmp, self.render(report))
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", tmp.display()))?;
            std::fs::rename(&tmp, path)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        }
        Ok(())
    }

    /// Writes the final report.
    pub fn finish(&self, report: &Report) -> anyhow::Result<()> {
        match &self.path {
            Some(_) => self.checkpoint(report),
            None => {
                let mut out = std::io::stdout().lock();
                out.write_all(self.render(report).as_bytes())?;
                out.flush()?;
                Ok(())
            }
        }
    }
}

/// A throughput as `1.23 M/s`, `45.6 k/s` or `7.8 /s`.
pub fn human_rate(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} M/s", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} k/s", v / 1e3)
    } else {
        format!("{v:.1} /s")
    }
}
