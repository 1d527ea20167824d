//! The runs: glibc's with statistics first, the repeats interleaved (each checked against glibc's
//! first run), one run with statistics per other choice; the header and the progress bar.

use super::*;

/// One choice's runs and what went wrong.
#[derive(Default, Clone)]
pub(super) struct Arm {
    /// A run was killed at the time limit: the row runs no more (each would cost the limit again).
    pub(super) gave_up: bool,
    pub(super) values: Vec<f64>,
    pub(super) failure: Option<String>,
    pub(super) top: Vec<serde_json::Value>,
}

/// What the runs gave: the choices run (the rwlock rows only if the program takes rwlocks), each
/// one's runs, glibc's lock statistics and glibc's exit status (the reference).
pub(super) struct Measured {
    pub(super) choices: Vec<Choice>,
    pub(super) arms: Vec<Arm>,
    pub(super) glibc_processes: Vec<crate::external::lockstat::ProcessStat>,
    pub(super) takes_rwlocks: bool,
    pub(super) ref_status: Option<ExitStatus>,
}

/// The repeats' state: glibc's first run (status and output: the reference every run is checked
/// against), glibc's slowest run (the time limit of the others), and a difference between glibc's
/// own outputs.
#[derive(Default)]
pub(super) struct Repeats {
    pub(super) reference: Option<(ExitStatus, Vec<u8>)>,
    pub(super) glibc_max: f64,
    pub(super) nondeterministic: Option<String>,
}

/// How long a run may take: 10 x glibc's slowest (at least 10 s), or [`FIRST_LIMIT`] before glibc
/// has run.
pub(super) fn limit(glibc_max: f64) -> Duration {
    if glibc_max > 0.0 {
        Duration::from_secs_f64((10.0 * glibc_max).max(10.0))
    } else {
        FIRST_LIMIT
    }
}

/// Every run: glibc's with statistics first, the repeats interleaved, then one run with statistics
/// per other choice (its top call sites).
pub(super) fn run_all(r: &Runner) -> anyhow::Result<Measured> {
    let plan = r.plan;
    let stat_dir = r.scratch.join("stat");
    let stat_run = |choice: &Choice,
                    limit: Duration|
     -> anyhow::Result<(
        Result<Outcome, String>,
        Vec<crate::external::lockstat::ProcessStat>,
    )> {
        let _ = std::fs::remove_dir_all(&stat_dir);
        std::fs::create_dir_all(&stat_dir)?;
        let o = r.run(choice, Some(&stat_dir), limit)?;
        let (mut processes, _) = crate::external::lockstat::read_dir(&stat_dir);
        crate::external::lockstat::symbolise(&mut processes);
        Ok((o, processes))
    };
    // First, glibc with statistics: whether the program takes rwlocks (the rwlock rows), and the
    // statistics the prediction reads.
    let (glibc_stat, glibc_processes) = stat_run(&plan.choices[0], FIRST_LIMIT)?;
    let takes_rwlocks = glibc_processes
        .iter()
        .flat_map(|p| &p.records)
        .any(|rec| rec.kind == "rwlock" && rec.acquisitions + rec.read_acquisitions > 0);
    let choices: Vec<Choice> = plan
        .choices
        .iter()
        .filter(|c| plan.rwlocks_explicit || takes_rwlocks || !c.label.starts_with("rwlock:"))
        .cloned()
        .collect();
    let n = choices.len();
    let mut arms: Vec<Arm> = vec![Arm::default(); n];
    print_header(plan, n);
    let total = (plan.repeats * n + n - 1) as u64;
    let bar = progress_bar(total);
    let mut state = Repeats::default();
    for _ in 0..plan.repeats {
        for (i, choice) in choices.iter().enumerate() {
            bar.set_message(format!(
                "run {} of {total}: {}",
                bar.position() + 1,
                choice.label
            ));
            if arms[i].gave_up {
                bar.inc(1);
                continue;
            }
            let o = r.run(choice, None, limit(state.glibc_max))?;
            bar.inc(1);
            if let Err(e) = state.record(r, i, o, &mut arms[i]) {
                bar.finish_and_clear();
                return Err(e);
            }
        }
    }
    // One more run per choice with statistics: its top call sites (glibc's was the first run).
    let ref_status = state.reference.as_ref().map(|r| r.0);
    let check_stat = |o: Result<Outcome, String>| -> Option<String> {
        match (o, ref_status) {
            (Err(e), _) => Some(format!("(run with statistics) {e}")),
            (Ok(o), Some(s)) if o.status != s => Some(format!(
                "(run with statistics) {} (glibc: {}); stderr: {}",
                status_text(&o.status),
                status_text(&s),
                tail(&o.stderr, 5)
            )),
            _ => None,
        }
    };
    arms[0].top = crate::external::lockstat::top_sites(&glibc_processes, 3);
    if let Some(e) = check_stat(glibc_stat) {
        arms[0].failure.get_or_insert(e);
    }
    for (i, choice) in choices.iter().enumerate().skip(1) {
        bar.set_message(format!(
            "run {} of {total}: {} (statistics)",
            bar.position() + 1,
            choice.label
        ));
        bar.inc(1);
        if arms[i].gave_up {
            continue;
        }
        let (o, processes) = stat_run(choice, limit(state.glibc_max))?;
        arms[i].top = crate::external::lockstat::top_sites(&processes, 3);
        if let Some(e) = check_stat(o) {
            arms[i].failure.get_or_insert(e);
        }
    }
    bar.finish_and_clear();
    if let Some(d) = state.nondeterministic {
        anyhow::bail!(
            "--same-output: the program's standard output differs between its own runs under glibc ({d}): it cannot be compared"
        );
    }
    Ok(Measured {
        choices,
        arms,
        glibc_processes,
        takes_rwlocks,
        ref_status,
    })
}

/// The first line: the command, the repeats and choices, what is measured.
pub(super) fn print_header(plan: &TryPlan, n: usize) {
    println!(
        "locklab try: {}\n{} repeats interleaved over {} choices; {}{}",
        shell_words(&plan.cmd),
        plan.repeats,
        n,
        if plan.uses_rate() {
            format!(
                "rate from the output (`{}`)",
                plan.rate.as_ref().unwrap().as_str()
            )
        } else {
            "wall time".into()
        },
        if plan.same_output {
            "; standard output must match glibc's"
        } else {
            ""
        }
    );
}

/// The progress bar on a terminal (hidden otherwise).
pub(super) fn progress_bar(total: u64) -> indicatif::ProgressBar {
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        let b = indicatif::ProgressBar::new(total);
        b.set_style(
            indicatif::ProgressStyle::with_template("{msg}, {eta} left").expect("a valid template"),
        );
        b
    } else {
        indicatif::ProgressBar::hidden()
    }
}

impl Repeats {
    /// Checks one run of choice `i` against glibc's reference and keeps its value in `arm`; an
    /// error when glibc itself fails.
    pub(super) fn record(
        &mut self,
        r: &Runner,
        i: usize,
        o: Result<Outcome, String>,
        arm: &mut Arm,
    ) -> anyhow::Result<()> {
        let plan = r.plan;
        let o = match o {
            Ok(o) => o,
            Err(e) if i == 0 && self.reference.is_none() => {
                anyhow::bail!(
                    "the program fails under glibc itself ({e}): nothing to compare the locks with"
                );
            }
            Err(e) => {
                arm.gave_up = true;
                arm.failure.get_or_insert(e);
                return Ok(());
            }
        };
        if i == 0 {
            self.glibc_max = self.glibc_max.max(o.wall);
        }
        if self.reference.is_none() && !o.status.success() {
            // Every row is compared with glibc's run: a program that fails under glibc itself
            // would "verify" everywhere while measuring its failure.
            anyhow::bail!(
                "the program fails under glibc itself ({}; stderr: {}): nothing to compare the locks with",
                status_text(&o.status),
                tail(&o.stderr, 3)
            );
        }
        let (ref_status, ref_out) = self
            .reference
            .get_or_insert_with(|| (o.status, o.stdout.clone()));
        if o.status != *ref_status {
            arm.failure.get_or_insert(format!(
                "{} (glibc: {}); stderr: {}",
                status_text(&o.status),
                status_text(ref_status),
                tail(&o.stderr, 5)
            ));
            return Ok(());
        }
        if plan.same_output && o.stdout != *ref_out {
            let d = first_difference(ref_out, &o.stdout);
            if i == 0 {
                self.nondeterministic.get_or_insert(d);
            } else {
                arm.failure
                    .get_or_insert(format!("standard output differs from glibc's, {d}"));
            }
            return Ok(());
        }
        match r.value(&o) {
            Ok(v) => arm.values.push(v),
            Err(e) => {
                arm.failure.get_or_insert(e);
            }
        }
        Ok(())
    }
}
