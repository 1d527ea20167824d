//! `locklab report`: one self-contained HTML page (inline SVG drawn with plotters, no network) from any
//! JSON the lab wrote (`bench --json`, the default job's, `reproduce --json`): per run, the machine and
//! its limits, the who-wins summary, each reproduction with its table and verdict, and per workload
//! configuration a summary chart (our fastest lock / the fastest peer), then the scaling curves (with a
//! linear reference), latency CDFs from the recorded histograms, idle CPU and hand-over rates (ours
//! solid, peers dashed, baselines dotted; crowded groups split by family).
//!
//! The page carries a small script that counts, once loaded, the plots that rendered (an `<svg>` with
//! a non-empty box and drawn marks) and any script errors into `data-*` attributes of `<body>`: the
//! browser check (`.ci/check-report.sh`) reads them from headless Chromium's DOM.
//!
//! The entry points other commands may use (the default job writes its page through them):
//! [`RunDoc`], [`render`] and [`write()`].

use crate::engine::metrics::ResultRow;
use crate::engine::output::Report;
use crate::engine::output::reproduction::Reproduction;
use crate::usage::UsageError;
use clap::Args;
use plotters::prelude::*;
use serde::Deserialize;
use std::fmt::Write as _;

mod apps;
mod chart;
mod plots;
use apps::*;
use chart::*;
use plots::*;

/// One input run: the lab's document plus any reproductions.
#[derive(Debug, Deserialize)]
pub struct RunDoc {
    /// Machine, limits and rows.
    #[serde(flatten)]
    pub report: Report,
    /// `reproduce`'s entries (absent in `bench` documents).
    #[serde(default)]
    pub reproductions: Vec<Reproduction>,
    /// `advise`'s grid and map (absent elsewhere).
    #[serde(default)]
    pub grid: Option<crate::engine::advice::Grid>,
    /// `advise`'s cells.
    #[serde(default)]
    pub cells: Vec<crate::engine::advice::Cell>,
    /// `advise`'s rules of thumb.
    #[serde(default)]
    pub rules: Vec<crate::engine::advice::Rule>,
    /// `apps --json`'s rows and unavailable apps (absent elsewhere).
    #[serde(default)]
    pub apps: Vec<serde_json::Value>,
    /// Where it came from (a file name), for the section heading.
    #[serde(skip)]
    pub source: String,
    /// A `predict --json` document: its rows were computed on a simulated machine.
    #[serde(skip)]
    pub predicted: bool,
}

/// What a predicted row's lock is called on the page: never mistaken for a measured one.
pub fn predicted_name(lock: &str) -> String {
    format!("{lock} (predicted)")
}

/// A `predict --json` document as a run: its machine line says PREDICTED and names the simulated
/// machine, and every lock is renamed with [`predicted_name`].
fn predicted_doc(path: &str, v: serde_json::Value) -> anyhow::Result<RunDoc> {
    let p: crate::engine::sim::PredictReport = serde_json::from_value(v)
        .map_err(|e| anyhow::anyhow!("{path} is not a locklab predict --json report: {e}"))?;
    let mut machine = p.host;
    machine.cpu_model = format!("PREDICTED on {}: {}", p.machine.name, p.machine.what);
    machine.logical_cpus = p.machine.cores();
    let results = p
        .results
        .into_iter()
        .map(|mut r| {
            r.lock = predicted_name(&r.lock);
            r.predicted = true;
            r
        })
        .collect();
    Ok(RunDoc {
        report: Report {
            locklab_version: p.locklab_version,
            machine,
            calibration: Default::default(),
            results,
        },
        reproductions: vec![],
        grid: None,
        cells: vec![],
        rules: vec![],
        apps: vec![],
        source: path.to_string(),
        predicted: true,
    })
}

/// With measured and predicted documents together, each measured run's charts also draw the
/// predicted rows of the same workload (named "... (predicted)"): predicted next to measured.
pub fn merge_predicted(docs: &mut [RunDoc]) {
    let predicted: Vec<ResultRow> = docs
        .iter()
        .filter(|d| d.predicted)
        .flat_map(|d| d.report.results.iter().cloned())
        .collect();
    if predicted.is_empty() {
        return;
    }
    for d in docs.iter_mut().filter(|d| !d.predicted) {
        let extra: Vec<ResultRow> = predicted
            .iter()
            .filter(|p| {
                d.report.results.iter().any(|r| {
                    r.workload == p.workload
                        && r.cs_ns == p.cs_ns
                        && r.think_ns == p.think_ns
                        && r.read_pct == p.read_pct
                })
            })
            .cloned()
            .collect();
        d.report.results.extend(extra);
    }
}

/// Reads a run written by the lab (`bench --json`, the default job's, or `reproduce --json`).
pub fn load(path: &str) -> anyhow::Result<RunDoc> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("{path} is not a locklab --json report: {e}"))?;
    if value.get("predicted") == Some(&serde_json::Value::Bool(true))
        && value.get("results").is_some()
    {
        return predicted_doc(path, value);
    }
    let mut doc: RunDoc = serde_json::from_value(value)
        .map_err(|e| anyhow::anyhow!("{path} is not a locklab --json report: {e}"))?;
    // Every field has a default (an `apps` document has no calibration or rows), so say when there
    // is nothing of the lab's in it at all.
    if doc.report.locklab_version.is_empty()
        || (doc.report.results.is_empty()
            && doc.reproductions.is_empty()
            && doc.grid.is_none()
            && doc.apps.is_empty())
    {
        anyhow::bail!(
            "{path} is not a locklab --json report (no locklab_version, or no results, \
             reproductions, advise map or apps)"
        );
    }
    doc.source = path.to_string();
    Ok(doc)
}

/// Writes `html` to `path` (creating or replacing it).
pub fn write(path: &str, html: &str) -> anyhow::Result<()> {
    std::fs::write(path, html).map_err(|e| anyhow::anyhow!("cannot write {path}: {e}"))
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;max-width:1200px;margin:24px auto;padding:0 16px;color:#222}\
h1{font-size:24px}h2{font-size:20px;border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:36px}h3{font-size:16px}\
table.kv td{padding:2px 12px 2px 0;font-size:14px}pre{background:#f6f6f6;padding:10px;overflow-x:auto;font-size:12px}\
figure{margin:14px 14px 14px 0;display:inline-block;vertical-align:top}figcaption{font-size:13px;color:#444;max-width:570px}\
.legend{font-size:12px;max-width:570px}.legend span{display:inline-block;margin:2px 10px 2px 0}\
.legend i{display:inline-block;width:18px;height:0;margin-right:4px;vertical-align:middle}\
.ok{color:#176b2c;font-weight:600}.no{color:#a33;font-weight:600}.verdict{font-size:14px}";

/// The load-time check the browser test reads: plots rendered (a visible `<svg>` with drawn marks) and
/// errors seen, as attributes of `<body>`.
const SCRIPT: &str = "var locklabErrors=[];\
window.addEventListener('error',function(e){locklabErrors.push(String(e.message))});\
(function(){var ce=console.error;console.error=function(){locklabErrors.push(Array.prototype.join.call(arguments,' '));ce.apply(console,arguments)}})();\
window.addEventListener('load',function(){var figs=document.querySelectorAll('figure[data-plot]');var ok=0;\
figs.forEach(function(f){var s=f.querySelector('svg');if(!s)return;var r=s.getBoundingClientRect();\
if(r.width>0&&r.height>0&&s.querySelectorAll('polyline,path,circle,line').length>0){ok++;f.dataset.rendered='1'}});\
document.body.dataset.plotsExpected=figs.length;document.body.dataset.plotsRendered=ok;\
document.body.dataset.errors=locklabErrors.length;document.body.dataset.errorText=locklabErrors.join(' | ');});";

/// Writes one plot as a `<figure>` with its caption and legend.
fn figure(h: &mut String, p: &Plot) -> std::fmt::Result {
    write!(
        h,
        "<figure data-plot=\"{}\">{}<figcaption>{}</figcaption><div class=\"legend\">",
        esc(&p.id),
        p.svg,
        esc(&p.caption)
    )?;
    for (name, c, stroke) in &p.legend {
        let width = if *stroke == Stroke::Fill { 10 } else { 3 };
        write!(
            h,
            "<span><i style=\"border-top:{width}px {} rgb({},{},{})\"></i>{}</span>",
            stroke.css(),
            c.0,
            c.1,
            c.2,
            esc(name)
        )?;
    }
    h.push_str("</div></figure>\n");
    Ok(())
}

/// The page for `runs`; `Err` names a plot that could not be drawn.
pub fn render(runs: &[RunDoc]) -> anyhow::Result<String> {
    let mut h = String::new();
    let mut n_plots = 0;
    write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>locklab report</title><style>{STYLE}</style><script>{SCRIPT}</script></head><body>\n<h1>locklab report</h1>\n<p>locklab {}: {} run(s). Every figure below was measured on the machine named in its section; compare ratios within one run, not absolute times across machines.</p>\n",
        esc(env!("CARGO_PKG_VERSION")),
        runs.len()
    )?;
    for (i, run) in runs.iter().enumerate() {
        let r = &run.report;
        let m = &r.machine;
        let c = &r.calibration;
        write!(
            h,
            "<h2 id=\"run{i}\">Run {}: {}</h2>\n<table class=\"kv\"><tr><td>CPU</td><td>{}</td></tr><tr><td>logical CPUs</td><td>{}</td></tr><tr><td>kernel</td><td>{}</td></tr><tr><td>rustc</td><td>{}</td></tr><tr><td>locklab</td><td>{}</td></tr>\
{}</table>\n",
            i + 1,
            esc(if run.source.is_empty() {
                "this run"
            } else {
                &run.source
            }),
            esc(&m.cpu_model),
            m.logical_cpus,
            esc(&m.kernel),
            esc(&m.rustc),
            esc(&r.locklab_version),
            // An `apps` document has no calibration.
            if c.atomic_rmw_ns > 0.0 {
                format!(
                    "<tr><td>uncontended atomic RMW</td><td>{:.2} ns</td></tr><tr><td>CAS</td><td>{:.2} ns</td></tr><tr><td>cache-line transfer</td><td>{:.1} ns (median {:.1})</td></tr><tr><td>futex wake</td><td>{:.0} ns</td></tr>",
                    c.atomic_rmw_ns,
                    c.cas_ns,
                    c.line_transfer_ns,
                    c.line_transfer_median_ns,
                    c.futex_wake_ns
                )
            } else {
                String::new()
            },
        )?;
        if !run.reproductions.is_empty() {
            h += "<h3>The seeds reproduced</h3>\n";
            for p in &run.reproductions {
                let (cls, word) = if p.reproduced {
                    ("ok", "reproduced")
                } else {
                    ("no", "not reproduced")
                };
                writeln!(
                    h,
                    "<section class=\"repro\" data-seed=\"{}\"><h3>seed {}: {}</h3><p class=\"verdict\"><span class=\"{cls}\">{word}</span> {}</p><pre>{}</pre></section>",
                    esc(&p.seed),
                    esc(&p.seed),
                    esc(&p.title),
                    esc(p
                        .verdict
                        .split_once(": ")
                        .map_or(p.verdict.as_str(), |v| v.1)),
                    esc(&p.table)
                )?;
            }
        }
        if let Some(grid) = &run.grid {
            h += "<h3>Which lock wins where (advise)</h3>\n";
            for p in heat_maps(i, grid, &run.cells) {
                let p = p.map_err(|e| anyhow::anyhow!("report: cannot draw a plot: {e}"))?;
                n_plots += 1;
                figure(&mut h, &p)?;
            }
            let rules: Vec<&str> = run.rules.iter().map(|r| r.text.as_str()).collect();
            writeln!(h, "<pre>{}</pre>", esc(&rules.join("\n")))?;
        }
        if !run.apps.is_empty() {
            n_plots += apps_section(&mut h, i, &run.apps)?;
        }
        if r.results.is_empty() {
            continue;
        }
        writeln!(
            h,
            "<h3>Who wins where</h3><pre>{}</pre>",
            esc(&crate::engine::suite::summary(r))
        )?;
        for g in groups(&r.results) {
            writeln!(h, "<h3>{}</h3>", esc(&g.key))?;
            for p in group_plots(i, &g, m.logical_cpus) {
                let p = p.map_err(|e| anyhow::anyhow!("report: cannot draw a plot: {e}"))?;
                n_plots += 1;
                figure(&mut h, &p)?;
            }
        }
    }
    writeln!(h, "<p data-plots=\"{n_plots}\"></p></body></html>")?;
    Ok(h)
}

/// The error of `report` without `--from`: where a run comes from.
pub const NEEDS_FROM: &str = "report needs --from RUN.json: make one with `locklab bench --workload mutex --json RUN.json` (or `reproduce --json`, `advise --json`, `apps --json`, `try --json`, `predict --json`); the default job (`cargo run --release`, or `locklab` alone) writes its own locklab-report.html";

/// `locklab report` options.
#[derive(Args, Debug, Clone)]
pub struct ReportArgs {
    /// A `--json` file of `bench`, `reproduce` or the default job; repeat for several runs.
    #[arg(long, value_name = "RUN.json")]
    pub from: Vec<String>,
    /// Where to write the page.
    #[arg(long, value_name = "F", default_value = "locklab-report.html")]
    pub out: String,
}

/// `locklab report --from F [--from F ...] [--out F]`: a page from the given runs; prints the page's
/// path last. (Without `--from` the command line runs the default job, which writes its own page.)
pub fn command(a: &ReportArgs) -> anyhow::Result<()> {
    if a.from.is_empty() {
        return Err(UsageError(NEEDS_FROM.into()).into());
    }
    let (from, out) = (&a.from, a.out.as_str());
    let mut docs = from
        .iter()
        .map(|f| load(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    merge_predicted(&mut docs);
    write(out, &render(&docs)?)?;
    let path = std::fs::canonicalize(out).unwrap_or_else(|_| out.into());
    println!("report: {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::metrics::{Latency, Spread};

    fn row(workload: &str, lock: &str, threads: usize, ops: f64) -> ResultRow {
        ResultRow {
            workload: workload.into(),
            lock: lock.into(),
            threads,
            ops_per_sec: Spread {
                median: ops,
                min: ops,
                max: ops,
            },
            idle_pct: 10.0 * threads as f64,
            handover_rate: Some(0.5),
            acquire_ns: Latency {
                p50: 20,
                p99: 80,
                p999: 90,
                max: 100,
                histogram: vec![(20, 50), (80, 49), (100, 1)],
            },
            ..Default::default()
        }
    }

    #[test]
    fn every_group_gets_its_plots_and_the_page_counts_them() {
        let doc = RunDoc {
            report: Report {
                results: vec![
                    row("mutex", "mutex", 1, 1e7),
                    row("mutex", "mutex", 2, 1.5e7),
                    row("mutex", "parking-lot-mutex", 1, 9e6),
                    row("mutex", "parking-lot-mutex", 2, 1.2e7),
                    row("mutex", "none", 1, 1e9),
                    row("refcount", "lockref", 1, 5e7),
                ],
                ..Default::default()
            },
            reproductions: vec![],
            grid: None,
            cells: vec![],
            rules: vec![],
            apps: vec![],
            source: "x.json".into(),
            predicted: false,
        };
        let html = render(&[doc]).unwrap();
        // mutex: the summary (ours and a peer), scaling, latency, idle, hand-over; refcount (ours
        // only): the four.
        assert!(
            html.contains("<p data-plots=\"9\">"),
            "{}",
            &html[html.len() - 200..]
        );
        assert_eq!(html.matches("<figure data-plot=").count(), 9);
        assert_eq!(html.matches("<svg").count(), 9);
        assert!(html.contains("-summary\""));
        // Ours solid, peers dashed in the legend.
        assert!(html.contains("3px solid rgb(31,119,180)\"></i>mutex</span>"));
        assert!(html.contains("3px dashed"));
        assert!(html.contains("linear (from mutex at 1 thread"));
        // `none` is left out of the lines and the legend.
        assert!(!html.contains("</i>none</span>"));
        assert!(html.contains("</i>parking-lot-mutex</span>"));
        // No network: nothing is fetched.
        assert!(!html.contains("<link") && !html.contains("src=") && !html.contains("url("));
    }

    #[test]
    fn apps_get_ratio_bars_and_their_call_sites() {
        let text = r#"{"locklab_version": "0.1.0", "machine": {"cpu_model": "X", "logical_cpus": 2,
            "kernel": "k", "rustc": "r"}, "apps": [
            {"app": "tokyo-hash", "lock": "glibc", "threads": 2, "runs": [100.0, 110.0],
             "median": 105.0, "min": 100.0, "max": 110.0, "ratio_vs_glibc": 1.0,
             "verdict": "reference", "verified": true, "top_locks": []},
            {"app": "tokyo-hash", "lock": "mutex", "threads": 2, "runs": [150.0, 160.0],
             "median": 155.0, "min": 150.0, "max": 160.0, "ratio_vs_glibc": 1.476,
             "verdict": "faster", "verified": true, "top_locks": [{"site": "tchdbput+0x4a (libtc.so)",
             "acquisitions": 9, "contentions": 3, "wait_ns_total": 1500, "wait_ns_max": 900,
             "hold_ns_total": 10}]},
            {"app": "pigz", "unavailable": "install pigz"}]}"#;
        let doc: RunDoc = serde_json::from_str(text).unwrap();
        let page = render(&[doc]).unwrap();
        assert!(
            page.contains("data-plots=\"1\""),
            "one chart: tokyo-hash at 2 threads"
        );
        assert!(page.contains("tokyo-hash, 2 threads: speed / glibc"));
        assert!(page.contains("1.48x"), "the mutex bar's label");
        assert!(page.contains("tchdbput+0x4a (libtc.so) (3 contentions, 1500 ns waiting)"));
        assert!(page.contains("Not installed: pigz (install pigz)."));
        assert!(
            !page.contains("uncontended atomic RMW"),
            "no calibration in an apps document"
        );
    }

    #[test]
    fn try_rows_of_wall_time_are_drawn_as_speed_ups() {
        let text = r#"{"locklab_version": "0.1.0", "machine": {"cpu_model": "X", "logical_cpus": 2,
            "kernel": "k", "rustc": "r"}, "apps": [
            {"app": "./prog", "lock": "glibc", "threads": 0, "unit": "s", "higher_is_better": false,
             "runs": [4.0], "median": 4.0, "min": 3.5, "max": 4.5, "ratio_vs_glibc": 1.0,
             "verdict": "reference", "verified": true, "top_locks": []},
            {"app": "./prog", "lock": "mcs", "threads": 0, "unit": "s", "higher_is_better": false,
             "runs": [2.0], "median": 2.0, "min": 1.6, "max": 2.5, "ratio_vs_glibc": 2.0,
             "verdict": "faster", "verified": true, "top_locks": []},
            {"app": "./prog", "lock": "tas", "threads": 0, "unit": "s", "higher_is_better": false,
             "runs": [], "median": 0.0, "min": 0.0, "max": 0.0, "ratio_vs_glibc": 0.0,
             "verdict": "failed", "verified": false, "top_locks": []}]}"#;
        let doc: RunDoc = serde_json::from_str(text).unwrap();
        let page = render(&[doc]).unwrap();
        assert!(
            page.contains("./prog, its own threads: speed / glibc"),
            "a try row"
        );
        assert!(page.contains("2.00x"), "half the time is twice the speed");
        assert!(
            page.contains("0.00x"),
            "a failed row has no bar, and no infinity"
        );
        assert!(
            !page.contains("infx") && !page.contains("NaN"),
            "no division by a zero time"
        );
    }

    #[test]
    fn the_cdf_accumulates_to_100_percent() {
        let p = cdf(&[(20, 50), (80, 49), (100, 1)]);
        assert_eq!(p, vec![(20.0, 50.0), (80.0, 99.0), (100.0, 100.0)]);
        assert!(cdf(&[]).is_empty());
        let r = row("mutex", "mutex", 2, 1.0);
        let g = Group {
            key: "k".into(),
            rows: vec![&r],
        };
        let plots: Vec<Plot> = group_plots(0, &g, 2)
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(plots.len(), 4);
        assert!(plots[1].id.ends_with("latency") && plots[1].caption.contains("at 2 threads"));
    }

    #[test]
    fn html_is_escaped() {
        assert_eq!(esc("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
        assert_eq!(human(1_234_567.0), "1.2M");
        assert_eq!(human(35_000.0), "35k");
        assert_eq!(human(0.5), "0.50");
    }

    #[test]
    fn a_predicted_run_is_named_and_drawn_next_to_the_measured_one() {
        let dir = std::env::temp_dir().join(format!("locklab-report-pred-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let m = crate::engine::sim::machine("opteron-48").unwrap();
        let mut p = row("mutex", "ticket", 48, 4e5);
        p.predicted = true;
        let predicted = crate::engine::sim::PredictReport {
            locklab_version: "0.1.0".into(),
            predicted: true,
            machine: m,
            host: Default::default(),
            simulator: Default::default(),
            results: vec![p],
        };
        let pf = dir.join("p.json");
        std::fs::write(&pf, serde_json::to_string(&predicted).unwrap()).unwrap();
        let measured = Report {
            locklab_version: "0.1.0".into(),
            results: vec![row("mutex", "ticket", 1, 1e7), row("rw", "ticket", 1, 1e7)],
            ..Default::default()
        };
        let mf = dir.join("m.json");
        std::fs::write(&mf, serde_json::to_string(&measured).unwrap()).unwrap();
        let mut docs = vec![
            load(mf.to_str().unwrap()).unwrap(),
            load(pf.to_str().unwrap()).unwrap(),
        ];
        assert!(docs[1].predicted);
        assert!(
            docs[1]
                .report
                .machine
                .cpu_model
                .starts_with("PREDICTED on opteron-48")
        );
        assert_eq!(docs[1].report.results[0].lock, "ticket (predicted)");
        merge_predicted(&mut docs);
        // The measured run's mutex group now has the predicted row; its rw group does not.
        let names: Vec<(&str, &str)> = docs[0]
            .report
            .results
            .iter()
            .map(|r| (r.workload.as_str(), r.lock.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![
                ("mutex", "ticket"),
                ("rw", "ticket"),
                ("mutex", "ticket (predicted)")
            ]
        );
        let html = render(&docs).unwrap();
        assert!(html.contains("ticket (predicted)"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
