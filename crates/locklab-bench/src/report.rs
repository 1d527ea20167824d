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

use crate::metrics::ResultRow;
use crate::output::Report;
use crate::reproduce::Reproduction;
use plotters::prelude::*;
use serde::Deserialize;
use std::fmt::Write as _;

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
    pub grid: Option<crate::advise::Grid>,
    /// `advise`'s cells.
    #[serde(default)]
    pub cells: Vec<crate::advise::Cell>,
    /// `advise`'s rules of thumb.
    #[serde(default)]
    pub rules: Vec<crate::advise::Rule>,
    /// `apps --json`'s rows and unavailable apps (absent elsewhere).
    #[serde(default)]
    pub apps: Vec<serde_json::Value>,
    /// Where it came from (a file name), for the section heading.
    #[serde(skip)]
    pub source: String,
}

/// One `(app, threads)` group of `apps` rows, glibc first as the lab writes them.
fn app_groups(rows: &[serde_json::Value]) -> Vec<(String, u64, Vec<&serde_json::Value>)> {
    let mut out: Vec<(String, u64, Vec<&serde_json::Value>)> = Vec::new();
    for r in rows.iter().filter(|r| r.get("lock").is_some()) {
        let app = r["app"].as_str().unwrap_or("?").to_string();
        let threads = r["threads"].as_u64().unwrap_or(0);
        match out.iter_mut().find(|g| g.0 == app && g.1 == threads) {
            Some(g) => g.2.push(r),
            None => out.push((app, threads, vec![r])),
        }
    }
    out
}

/// An app's bars: each lock's median throughput as a ratio to glibc's median, with whiskers from
/// its slowest to its fastest run (also over glibc's median), and the 1.0 line.
fn app_chart(app: &str, threads: u64, rows: &[&serde_json::Value]) -> Result<String, String> {
    let glibc = rows
        .iter()
        .find(|r| r["lock"] == "glibc")
        .and_then(|r| r["median"].as_f64())
        .filter(|&m| m > 0.0)
        .ok_or_else(|| format!("{app}: no glibc row"))?;
    let bars: Vec<(String, f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            let f = |k: &str| r[k].as_f64().unwrap_or(0.0) / glibc;
            (
                r["lock"].as_str().unwrap_or("?").to_string(),
                f("median"),
                f("min"),
                f("max"),
            )
        })
        .collect();
    let y1 = bars.iter().map(|b| b.3).fold(1.0f64, f64::max) * 1.15;
    let n = bars.len() as f64;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut c = ChartBuilder::on(&root)
            .caption(
                format!("{app}, {threads} threads: throughput / glibc's"),
                ("sans-serif", 16),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(n - 0.5), 0f64..y1)
            .map_err(|e| e.to_string())?;
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        c.configure_mesh()
            .disable_x_mesh()
            .x_labels(bars.len())
            .x_label_formatter(&|v| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 {
                    names.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("ratio to glibc (median; whiskers: min..max)")
            .y_label_formatter(&|v| format!("{v:.2}"))
            .light_line_style(RGBColor(248, 248, 248))
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, b) in bars.iter().enumerate() {
            let x = i as f64;
            let col = if b.0 == "glibc" {
                RGBColor(127, 127, 127)
            } else {
                color(i)
            };
            c.draw_series(std::iter::once(Rectangle::new(
                [(x - 0.3, 0.0), (x + 0.3, b.1)],
                ShapeStyle::from(&col).filled(),
            )))
            .map_err(|e| e.to_string())?;
            c.draw_series(std::iter::once(PathElement::new(
                vec![(x, b.2), (x, b.3)],
                ShapeStyle::from(&BLACK).stroke_width(2),
            )))
            .map_err(|e| e.to_string())?;
            c.draw_series(std::iter::once(Text::new(
                format!("{:.2}x", b.1),
                (x - 0.15, b.3 + y1 * 0.03),
                ("sans-serif", 11),
            )))
            .map_err(|e| e.to_string())?;
        }
        c.draw_series(DashedLineSeries::new(
            vec![(-0.5, 1.0), (n - 0.5, 1.0)],
            4,
            4,
            ShapeStyle::from(&BLACK),
        ))
        .map_err(|e| e.to_string())?;
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The apps section: per app and thread count, the ratio bars, then a table of each lock's figures and
/// its most waited-on call sites; then the apps that were not installed.
fn apps_section(h: &mut String, run: usize, rows: &[serde_json::Value]) -> anyhow::Result<usize> {
    let mut plots = 0;
    h.push_str("<h3>Real programs (apps): glibc's locks and ours, side by side</h3>\n");
    for (app, threads, group) in app_groups(rows) {
        let svg = app_chart(&app, threads, &group)
            .map_err(|e| anyhow::anyhow!("report: cannot draw a plot: {e}"))?;
        let p = Plot {
            id: format!("run{run}-apps-{}-{threads}", slug(&app)),
            caption: format!(
                "{app} at {threads} threads: each lock's median over glibc's (higher is better), whiskers from the slowest to the fastest run."
            ),
            svg,
            legend: Vec::new(),
        };
        figure(h, &p)?;
        plots += 1;
        h.push_str("<table class=\"apps\"><tr><th>lock</th><th>median</th><th>runs</th><th>vs glibc</th><th>verdict</th><th>most waited-on call sites (one run with --stat)</th></tr>\n");
        for r in &group {
            let sites: Vec<String> = r["top_locks"]
                .as_array()
                .map(|v| {
                    v.iter()
                        .take(3)
                        .map(|t| {
                            format!(
                                "{} ({} contentions, {} waiting)",
                                t["site"].as_str().unwrap_or("?"),
                                t["contentions"],
                                crate::lockstat::ns_text(t["wait_ns_total"].as_u64().unwrap_or(0))
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            writeln!(
                h,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{:.2}x</td><td>{}</td><td>{}</td></tr>",
                esc(r["lock"].as_str().unwrap_or("?")),
                human(r["median"].as_f64().unwrap_or(0.0)),
                r["runs"].as_array().map_or(0, |v| v.len()),
                r["ratio_vs_glibc"].as_f64().unwrap_or(0.0),
                esc(if r["verified"] == true {
                    r["verdict"].as_str().unwrap_or("")
                } else {
                    "NOT VERIFIED"
                }),
                esc(&sites.join("; "))
            )?;
        }
        h.push_str("</table>\n");
    }
    let missing: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            Some(format!(
                "{} ({})",
                r["app"].as_str()?,
                r["unavailable"].as_str()?
            ))
        })
        .collect();
    if !missing.is_empty() {
        writeln!(h, "<p>Not installed: {}.</p>", esc(&missing.join(", ")))?;
    }
    Ok(plots)
}

/// Reads a run written by the lab (`bench --json`, the default job's, or `reproduce --json`).
pub fn load(path: &str) -> anyhow::Result<RunDoc> {
    let text =
        std::fs::read_to_string(path).map_err(|e| anyhow::anyhow!("cannot read {path}: {e}"))?;
    let mut doc: RunDoc = serde_json::from_str(&text)
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

/// A plot: its id, caption, the SVG, and the legend's (name, colour, stroke) entries.
struct Plot {
    id: String,
    caption: String,
    svg: String,
    legend: Vec<(String, RGBColor, Stroke)>,
}

/// How a line is drawn: ours solid, peers dashed, baselines and references dotted.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stroke {
    Solid,
    Dashed,
    Dotted,
    /// A filled area (the heat maps' cells), in legends only.
    Fill,
}

impl Stroke {
    /// The stroke of a lock's line, by whose lock it is.
    fn of(lock: &str) -> Stroke {
        match crate::locks::find(lock).map(|l| l.kind) {
            Some(crate::locks::Kind::Ours) => Stroke::Solid,
            Some(crate::locks::Kind::Baseline) => Stroke::Dotted,
            _ => Stroke::Dashed,
        }
    }

    /// The legend swatch's CSS.
    fn css(self) -> &'static str {
        match self {
            Stroke::Solid => "solid",
            Stroke::Dashed => "dashed",
            Stroke::Dotted => "dotted",
            Stroke::Fill => "solid",
        }
    }
}

/// One line of a chart.
struct Line {
    name: String,
    points: Vec<(f64, f64)>,
    stroke: Stroke,
    color: RGBColor,
}

/// Ten colours that stay apart (Tableau 10), then the palette's others.
fn color(i: usize) -> RGBColor {
    const TEN: [(u8, u8, u8); 10] = [
        (31, 119, 180),
        (255, 127, 14),
        (44, 160, 44),
        (214, 39, 40),
        (148, 103, 189),
        (140, 86, 75),
        (227, 119, 194),
        (127, 127, 127),
        (188, 189, 34),
        (23, 190, 207),
    ];
    let (r, g, b) = if i < TEN.len() {
        TEN[i]
    } else {
        Palette99::pick(i).rgb()
    };
    RGBColor(r, g, b)
}

/// Most lock lines one plot shows; a group with more is drawn as two plots (ours, then the peers,
/// each with the other side's best as a reference).
const MAX_LINES: usize = 8;

const W: u32 = 570;
const H: u32 = 360;
/// Room right of the plot area for the lines' end labels.
const LABEL_W: u32 = 110;

/// Compact axis numbers: 1.2M, 350k, 12.5.
fn human(v: f64) -> String {
    let a = v.abs();
    if a >= 1e9 {
        format!("{:.1}G", v / 1e9)
    } else if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e3 {
        format!("{:.0}k", v / 1e3)
    } else if a >= 10.0 || a == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Draws `lines` on linear (or, with `log_x`, logarithmic) axes into an SVG string.
fn chart(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    lines: &[Line],
    log_x: bool,
    y_max_fixed: Option<f64>,
) -> Result<String, String> {
    let pts = lines.iter().flat_map(|l| l.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0f64);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        return Err(format!("{title}: nothing to draw"));
    }
    let y1 = y_max_fixed.unwrap_or(if y1 > 0.0 { y1 * 1.08 } else { 1.0 });
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let mut b = ChartBuilder::on(&root);
        b.caption(title, ("sans-serif", 16))
            .margin(12)
            .margin_right(LABEL_W)
            .x_label_area_size(40)
            .y_label_area_size(64);
        macro_rules! draw {
            ($chart:expr) => {{
                let mut c = $chart;
                c.configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_label_formatter(&|v| {
                        // Thread counts are integers: label those only.
                        if log_x {
                            human(*v)
                        } else if (v - v.round()).abs() < 1e-9 {
                            format!("{}", v.round() as i64)
                        } else {
                            String::new()
                        }
                    })
                    .y_label_formatter(&|v| human(*v))
                    .light_line_style(RGBColor(248, 248, 248))
                    .draw()
                    .map_err(|e| e.to_string())?;
                for l in lines {
                    let style = ShapeStyle::from(&l.color).stroke_width(2);
                    let pts = l.points.iter().copied();
                    match l.stroke {
                        Stroke::Solid | Stroke::Fill => c.draw_series(LineSeries::new(pts, style)),
                        Stroke::Dashed => c.draw_series(DashedLineSeries::new(pts, 7, 4, style)),
                        Stroke::Dotted => c.draw_series(DashedLineSeries::new(pts, 2, 4, style)),
                    }
                    .map_err(|e| e.to_string())?;
                    if l.stroke != Stroke::Dotted && l.points.len() <= 12 {
                        c.draw_series(
                            l.points
                                .iter()
                                .map(|&p| Circle::new(p, 3, ShapeStyle::from(&l.color).filled())),
                        )
                        .map_err(|e| e.to_string())?;
                    }
                    // The name at the line's end, next to it, in its colour (the legend below the
                    // plot repeats it with the stroke).
                    if let Some(&end) = l.points.last() {
                        let name: String = l.name.chars().take(22).collect();
                        c.draw_series(std::iter::once(Text::new(
                            name,
                            end,
                            ("sans-serif", 11).into_font().color(&l.color),
                        )))
                        .map_err(|e| e.to_string())?;
                    }
                }
            }};
        }
        if log_x {
            let x0 = x0.max(1.0);
            let x1 = (x1 * 1.2).max(x0 * 10.0);
            draw!(
                b.build_cartesian_2d((x0..x1).log_scale(), 0f64..y1)
                    .map_err(|e| e.to_string())?
            );
        } else {
            let pad = ((x1 - x0) * 0.04).max(0.25);
            draw!(
                b.build_cartesian_2d((x0 - pad)..(x1 + pad), 0f64..y1)
                    .map_err(|e| e.to_string())?
            );
        }
        root.present().map_err(|e| e.to_string())?;
    }
    Ok(svg)
}

/// The rows of one workload configuration (a chart group), by lock in first-seen order.
struct Group<'a> {
    key: String,
    rows: Vec<&'a ResultRow>,
}

fn groups(results: &[ResultRow]) -> Vec<Group<'_>> {
    let mut out: Vec<Group> = vec![];
    for r in results {
        let mut key = format!("{} cs {} ns, think {} ns", r.workload, r.cs_ns, r.think_ns);
        if let Some(p) = r.read_pct {
            key += &format!(", {p}% reads");
        }
        if let Some(w) = r.writers {
            key += &format!(", {w} writer(s)");
        }
        if let (Some(n), Some(how)) = (r.slots, &r.notify) {
            key += &format!(", {n} slot(s), notify_{how}");
        }
        match out.iter_mut().find(|g| g.key == key) {
            Some(g) => g.rows.push(r),
            None => out.push(Group { key, rows: vec![r] }),
        }
    }
    out
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The locks of a group (no `none`: the harness floor, each thread on its own data, would flatten
/// every other line), each with its rows sorted by threads.
fn by_lock<'a>(g: &Group<'a>) -> Vec<(String, Vec<&'a ResultRow>)> {
    let mut locks: Vec<(String, Vec<&ResultRow>)> = vec![];
    for r in &g.rows {
        if r.lock == "none" {
            continue;
        }
        match locks.iter_mut().find(|l| l.0 == r.lock) {
            Some(l) => l.1.push(r),
            None => locks.push((r.lock.clone(), vec![r])),
        }
    }
    for l in &mut locks {
        l.1.sort_by_key(|r| r.threads);
    }
    locks
}

/// A histogram's `[value_ns, count]` buckets as CDF points: (value, % of samples at or below it).
fn cdf(h: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let total: u64 = h.iter().map(|b| b.1).sum();
    if total == 0 {
        return vec![];
    }
    let mut acc = 0;
    h.iter()
        .map(|&(v, c)| {
            acc += c;
            ((v as f64).max(1.0), 100.0 * acc as f64 / total as f64)
        })
        .collect()
}

/// One line per lock from `points` (the lock's rows, by thread count), in the locks' colours; a lock
/// with no point is left out.
fn lines_of(
    locks: &[(String, Vec<&ResultRow>)],
    points: impl Fn(&[&ResultRow]) -> Vec<(f64, f64)>,
) -> Vec<Line> {
    locks
        .iter()
        .enumerate()
        .filter_map(|(i, (n, rows))| {
            let points = points(rows);
            (!points.is_empty()).then(|| Line {
                name: n.clone(),
                points,
                stroke: Stroke::of(n),
                color: color(i),
            })
        })
        .collect()
}

/// What a plot shows: its id suffix, title, axes, scale and caption.
struct Spec<'a> {
    id: String,
    title: String,
    x: &'a str,
    y: &'a str,
    log_x: bool,
    y_max: Option<f64>,
    caption: String,
}

/// Draws `lines` (nothing if there are none) with a legend of every line.
fn plot(spec: Spec, lines: &[Line]) -> Option<Result<Plot, String>> {
    if lines.is_empty() {
        return None;
    }
    Some(
        chart(&spec.title, spec.x, spec.y, lines, spec.log_x, spec.y_max).map(|svg| Plot {
            id: spec.id,
            caption: spec.caption,
            svg,
            legend: lines
                .iter()
                .map(|l| (l.name.clone(), l.color, l.stroke))
                .collect(),
        }),
    )
}

/// A lock's name and its rows, by thread count.
type LockRows<'a> = (String, Vec<&'a ResultRow>);
/// A line's points from a lock's rows.
type Points<'p> = dyn Fn(&[&ResultRow]) -> Vec<(f64, f64)> + 'p;

/// Our fastest lock / the fastest peer at each thread count (baselines left out), if the group has
/// both.
fn ours_vs_peer(locks: &[(String, Vec<&ResultRow>)], threads: &[usize]) -> Vec<(f64, f64)> {
    threads
        .iter()
        .filter_map(|&t| {
            let best = |stroke: Stroke| {
                locks
                    .iter()
                    .filter(|(n, _)| Stroke::of(n) == stroke)
                    .filter_map(|(_, rows)| rows.iter().find(|r| r.threads == t))
                    .map(|r| r.ops_per_sec.median)
                    .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
            };
            let (ours, peer) = (best(Stroke::Solid)?, best(Stroke::Dashed)?);
            (peer > 0.0).then(|| (t as f64, ours / peer))
        })
        .collect()
}

/// A lock's family, for splitting a crowded group: spinlocks, sleeping locks, reader-writer locks,
/// reference counts, RCU, and the peers (and baselines) by whose they are.
fn family(lock: &str) -> &'static str {
    match Stroke::of(lock) {
        Stroke::Solid => match lock {
            "tas" | "ticket" | "mcs" | "qspinlock" => "spinlocks",
            "mutex" | "condvar" => "sleeping locks",
            "rwspinlock" | "rwsem" | "percpu-rwsem" | "brlock" | "seqlock" => "rw locks",
            l if l.starts_with("lockref") => "reference counts",
            _ => "rcu",
        },
        _ => "peers",
    }
}

/// The locks of a group as the plots that show them: one set of plots if they fit in [`MAX_LINES`],
/// else one set per family of ours (each with the fastest peer for reference), then the peers in
/// sets of at most `MAX_LINES - 1` (each with our fastest), so every plot stays readable and each
/// side has its rival beside it. Speed is judged at the highest thread count.
fn parts<'a>(locks: &[LockRows<'a>]) -> Vec<(String, Vec<LockRows<'a>>)> {
    if locks.len() <= MAX_LINES {
        return vec![(String::new(), locks.to_vec())];
    }
    let top = |l: &LockRows| l.1.last().map_or(0.0, |r| r.ops_per_sec.median);
    let fastest = |ours: bool| {
        locks
            .iter()
            .filter(|(n, _)| (Stroke::of(n) == Stroke::Solid) == ours)
            .filter(|(n, _)| Stroke::of(n) != Stroke::Dotted)
            .max_by(|a, b| top(a).total_cmp(&top(b)))
            .cloned()
    };
    let mut out: Vec<(String, Vec<LockRows<'a>>)> = vec![];
    for l in locks.iter().filter(|(n, _)| Stroke::of(n) == Stroke::Solid) {
        let f = family(&l.0).to_string();
        match out
            .iter_mut()
            .find(|p| p.0 == f && p.1.len() < MAX_LINES - 1)
        {
            Some(p) => p.1.push(l.clone()),
            None => out.push((f, vec![l.clone()])),
        }
    }
    for p in &mut out {
        p.1.extend(fastest(false));
    }
    let others: Vec<LockRows<'a>> = locks
        .iter()
        .filter(|(n, _)| Stroke::of(n) != Stroke::Solid)
        .cloned()
        .collect();
    for chunk in others.chunks(MAX_LINES - 1) {
        let mut v = chunk.to_vec();
        v.extend(fastest(true));
        out.push(("peers".into(), v));
    }
    out
}

/// The plots of one group: the summary (ours / the best peer), then scaling, latency CDF (at the
/// highest thread count), idle % and hand-over rate, for every lock (split in two when there are
/// many: [`parts`]).
fn group_plots(run: usize, g: &Group, cpus: usize) -> Vec<Result<Plot, String>> {
    let all = by_lock(g);
    // A lock keeps its colour in every plot of the group.
    let hue = |name: &str| color(all.iter().position(|(n, _)| n == name).unwrap_or(0));
    let id = |what: &str| format!("run{run}-{}-{what}", slug(&g.key));
    let by_threads = |f: fn(&ResultRow) -> Option<f64>| {
        move |rows: &[&ResultRow]| -> Vec<(f64, f64)> {
            rows.iter()
                .filter_map(|r| Some((r.threads as f64, f(r)?)))
                .collect()
        }
    };
    let mut threads: Vec<usize> = g.rows.iter().map(|r| r.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let top = *threads.last().unwrap_or(&1);
    let k = &g.key;
    let mut out = vec![];

    let ratio = ours_vs_peer(&all, &threads);
    if !ratio.is_empty() {
        let one = vec![
            (threads[0] as f64, 1.0),
            (*threads.last().unwrap_or(&1) as f64, 1.0),
        ];
        out.extend(plot(
            Spec {
                id: id("summary"),
                title: format!("{k}: ours / the best peer"),
                x: "threads",
                y: "our fastest / fastest peer",
                log_x: false,
                y_max: None,
                caption: format!(
                    "Summary, {k}: our fastest lock's median ops/s over the fastest peer's, per thread count; above the dotted 1, ours is faster."
                ),
            },
            &[
                Line {
                    name: "ours / best peer".into(),
                    points: ratio,
                    stroke: Stroke::Solid,
                    color: color(0),
                },
                Line {
                    name: "equal".into(),
                    points: one,
                    stroke: Stroke::Dotted,
                    color: RGBColor(120, 120, 120),
                },
            ],
        ));
    }

    let split = parts(&all);
    let numbered = |i: usize, part: &str| -> String {
        // Two sets of one family (or of the peers): number them.
        let same = split.iter().filter(|p| p.0 == part).count();
        let nth = split[..i].iter().filter(|p| p.0 == part).count() + 1;
        if same > 1 {
            format!("{part} {nth}")
        } else {
            part.to_string()
        }
    };
    for (i, (part, locks)) in split.iter().enumerate() {
        let part = numbered(i, part);
        let lines = |points: &Points| -> Vec<Line> {
            let mut v = lines_of(locks, points);
            for l in &mut v {
                l.color = hue(&l.name);
            }
            v
        };
        let pid = |what: &str| {
            if part.is_empty() {
                id(what)
            } else {
                id(&format!("{what}-{}", slug(&part)))
            }
        };
        let who = if part.is_empty() {
            String::new()
        } else {
            format!(" ({part})")
        };
        // Scaling, with the linear reference from the best 1-thread row.
        let mut scaling = lines(&by_threads(|r| Some(r.ops_per_sec.median)));
        let best1 = locks
            .iter()
            .filter_map(|(n, rows)| {
                rows.iter()
                    .find(|r| r.threads == 1)
                    .map(|r| (n, r.ops_per_sec.median))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((name, one)) = best1 {
            scaling.push(Line {
                name: format!("linear (from {name} at 1 thread, capped at {cpus} CPUs)"),
                points: threads
                    .iter()
                    .map(|&t| (t as f64, one * t.min(cpus.max(1)) as f64))
                    .collect(),
                stroke: Stroke::Dotted,
                color: RGBColor(120, 120, 120),
            });
        }
        // Latency CDF at the highest thread count, from the recorded histograms.
        let latency = lines(&|rows: &[&ResultRow]| {
            rows.iter()
                .find(|r| r.threads == top)
                .map_or(vec![], |r| cdf(&r.acquire_ns.histogram))
        });
        out.extend(
            [
                plot(
                    Spec {
                        id: pid("scaling"),
                        title: format!("{k}{who}: throughput vs threads"),
                        x: "threads",
                        y: "ops/s (median)",
                        log_x: false,
                        y_max: None,
                        caption: format!(
                            "Scaling, {k}{who}: median ops/s per thread count; ours solid, peers dashed, baselines and the linear reference dotted."
                        ),
                    },
                    &scaling,
                ),
                plot(
                    Spec {
                        id: pid("latency"),
                        title: format!("{k}{who}: acquisition latency CDF at {top} threads"),
                        x: "ns (log)",
                        y: "% of sampled acquisitions",
                        log_x: true,
                        y_max: Some(100.0),
                        caption: format!(
                            "Latency CDF, {k}{who} at {top} threads: share of sampled acquisitions at or below each latency (HDR histogram, 3 significant digits)."
                        ),
                    },
                    &latency,
                ),
                plot(
                    Spec {
                        id: pid("idle"),
                        title: format!("{k}{who}: idle CPU vs threads"),
                        x: "threads",
                        y: "idle % of min(threads, CPUs)",
                        log_x: false,
                        y_max: Some(100.0),
                        caption: format!(
                            "Idle CPU, {k}{who}: 100 x (1 - CPU time / (wall x min(threads, CPUs)))."
                        ),
                    },
                    &lines(&by_threads(|r| Some(r.idle_pct))),
                ),
                // Hand-over rate, where the workload has exclusive operations.
                plot(
                    Spec {
                        id: pid("handover"),
                        title: format!("{k}{who}: hand-over rate vs threads"),
                        x: "threads",
                        y: "share of exclusive ops changing holder",
                        log_x: false,
                        y_max: Some(1.0),
                        caption: format!(
                            "Hand-over rate, {k}{who}: the share of exclusive operations whose holder differs from the previous one (1 = every acquisition moves the lock's line)."
                        ),
                    },
                    &lines(&by_threads(|r| r.handover_rate)),
                ),
            ]
            .into_iter()
            .flatten(),
        );
    }
    out
}

/// `advise`'s map as heat maps, one per read share: threads across, critical section up, each cell
/// coloured by its winner and labelled with it and its margin.
fn heat_maps(
    run: usize,
    grid: &crate::advise::Grid,
    cells: &[crate::advise::Cell],
) -> Vec<Result<Plot, String>> {
    let mut winners: Vec<&str> = vec![];
    for c in cells {
        if !winners.contains(&c.winner.as_str()) {
            winners.push(&c.winner);
        }
    }
    let colour = |w: &str| color(winners.iter().position(|x| *x == w).unwrap_or(0));
    grid.read_pct
        .iter()
        .map(|&read| {
            let (nx, ny) = (grid.threads.len(), grid.cs_ns.len());
            let mut svg = String::new();
            {
                let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
                root.fill(&WHITE).map_err(|e| e.to_string())?;
                let mut chart = ChartBuilder::on(&root)
                    .caption(format!("who wins at {read}% reads"), ("sans-serif", 16))
                    .margin(12)
                    .x_label_area_size(40)
                    .y_label_area_size(64)
                    .build_cartesian_2d(-0.5f64..nx as f64 - 0.5, -0.5f64..ny as f64 - 0.5)
                    .map_err(|e| e.to_string())?;
                chart
                    .configure_mesh()
                    .disable_mesh()
                    .x_labels(nx)
                    .y_labels(ny)
                    .x_desc("threads")
                    .y_desc("critical section, ns (think the same)")
                    // Cell i is centred on i: label the integers with the grid's values.
                    .x_label_formatter(&|v| {
                        let i = v.round();
                        if (v - i).abs() < 0.01 && i >= 0.0 {
                            grid.threads.get(i as usize).map_or(String::new(), |t| t.to_string())
                        } else {
                            String::new()
                        }
                    })
                    .y_label_formatter(&|v| {
                        let i = v.round();
                        if (v - i).abs() < 0.01 && i >= 0.0 {
                            grid.cs_ns.get(i as usize).map_or(String::new(), |c| c.to_string())
                        } else {
                            String::new()
                        }
                    })
                    .draw()
                    .map_err(|e| e.to_string())?;
                for c in cells.iter().filter(|c| c.read_pct == read) {
                    let (Some(x), Some(y)) = (
                        grid.threads.iter().position(|t| *t == c.threads),
                        grid.cs_ns.iter().position(|v| *v == c.cs_ns),
                    ) else {
                        continue;
                    };
                    let (x, y) = (x as f64, y as f64);
                    let fill = colour(&c.winner).mix(0.55).filled();
                    chart
                        .draw_series(std::iter::once(Rectangle::new(
                            [(x - 0.48, y - 0.48), (x + 0.48, y + 0.48)],
                            fill,
                        )))
                        .map_err(|e| e.to_string())?;
                    chart
                        .draw_series([
                            Text::new(c.winner.clone(), (x - 0.44, y + 0.12), ("sans-serif", 13)),
                            Text::new(
                                format!("x{:.2} (ours/peer {:.2})", c.margin, c.ours_vs_peer),
                                (x - 0.44, y - 0.12),
                                ("sans-serif", 11),
                            ),
                        ])
                        .map_err(|e| e.to_string())?;
                }
                root.present().map_err(|e| e.to_string())?;
            }
            Ok(Plot {
                id: format!("run{run}-advise-{read}"),
                caption: format!(
                    "advise, {read}% reads: the winner of each cell (median ops/s), its margin over the runner-up, and our fastest / the fastest peer."
                ),
                svg,
                legend: winners
                    .iter()
                    .map(|w| (w.to_string(), colour(w), Stroke::Fill))
                    .collect(),
            })
        })
        .collect()
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
            esc(&crate::suite::summary(r))
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

/// `locklab report --from F [--from F ...] [--out F]`: a page from the given runs; prints the page's
/// path last. (Without `--from` the command line runs the default job, which writes its own page.)
pub fn command(from: &[String], out: &str) -> anyhow::Result<()> {
    let docs = from
        .iter()
        .map(|f| load(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    write(out, &render(&docs)?)?;
    let path = std::fs::canonicalize(out).unwrap_or_else(|_| out.into());
    println!("report: {}", path.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Latency, Spread};

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
        assert!(page.contains("tokyo-hash, 2 threads: throughput / glibc"));
        assert!(page.contains("1.48x"), "the mutex bar's label");
        assert!(page.contains("tchdbput+0x4a (libtc.so) (3 contentions, 1500 ns waiting)"));
        assert!(page.contains("Not installed: pigz (install pigz)."));
        assert!(
            !page.contains("uncontended atomic RMW"),
            "no calibration in an apps document"
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
}
