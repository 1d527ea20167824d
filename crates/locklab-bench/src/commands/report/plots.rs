//! Which plots a run gets: results grouped per workload configuration, the summary, scaling,
//! latency, idle-CPU and hand-over plots of each group (split by family when crowded), and the heat
//! maps of `advise`.

use super::*;

/// The rows of one workload configuration (a chart group), by lock in first-seen order.
pub(super) struct Group<'a> {
    pub(super) key: String,
    pub(super) rows: Vec<&'a ResultRow>,
}

pub(super) fn groups(results: &[ResultRow]) -> Vec<Group<'_>> {
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

pub(super) fn slug(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

/// The locks of a group (no `none`: the harness floor, each thread on its own data, would flatten
/// every other line), each with its rows sorted by threads.
pub(super) fn by_lock<'a>(g: &Group<'a>) -> Vec<(String, Vec<&'a ResultRow>)> {
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
pub(super) fn cdf(h: &[(u64, u64)]) -> Vec<(f64, f64)> {
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
pub(super) fn lines_of(
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
pub(super) struct Spec<'a> {
    pub(super) id: String,
    pub(super) title: String,
    pub(super) x: &'a str,
    pub(super) y: &'a str,
    pub(super) log_x: bool,
    pub(super) y_max: Option<f64>,
    pub(super) caption: String,
}

/// Draws `lines` (nothing if there are none) with a legend of every line.
pub(super) fn plot(spec: Spec, lines: &[Line]) -> Option<Result<Plot, String>> {
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
pub(super) type LockRows<'a> = (String, Vec<&'a ResultRow>);
/// A line's points from a lock's rows.
pub(super) type Points<'p> = dyn Fn(&[&ResultRow]) -> Vec<(f64, f64)> + 'p;

/// Our fastest lock / the fastest peer at each thread count (baselines left out), if the group has
/// both.
pub(super) fn ours_vs_peer(
    locks: &[(String, Vec<&ResultRow>)],
    threads: &[usize],
) -> Vec<(f64, f64)> {
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
pub(super) fn family(lock: &str) -> &'static str {
    match Stroke::of(lock) {
        Stroke::Solid => match lock {
            "tas" | "ticket" | "mcs" | "qspinlock" => "spinlocks",
            "mutex" | "condvar" => "sleeping locks",
            "rwspinlock" | "rwsem" | "rwsem-biased" | "percpu-rwsem" | "brlock" | "seqlock" => {
                "rw locks"
            }
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
pub(super) fn parts<'a>(locks: &[LockRows<'a>]) -> Vec<(String, Vec<LockRows<'a>>)> {
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
pub(super) fn group_plots(run: usize, g: &Group, cpus: usize) -> Vec<Result<Plot, String>> {
    let mut threads: Vec<usize> = g.rows.iter().map(|r| r.threads).collect();
    threads.sort_unstable();
    threads.dedup();
    let gp = GroupPlots {
        run,
        key: &g.key,
        all: by_lock(g),
        top: *threads.last().unwrap_or(&1),
        threads,
        cpus,
    };
    let mut out = vec![];
    out.extend(gp.summary());
    let split = parts(&gp.all);
    for (i, (part, locks)) in split.iter().enumerate() {
        out.extend(gp.part_plots(&numbered(&split, i, part), locks));
    }
    out
}

/// The name of part `i` of `split`: numbered when there are two sets of one family (or of the
/// peers).
fn numbered(split: &[(String, Vec<LockRows>)], i: usize, part: &str) -> String {
    let same = split.iter().filter(|p| p.0 == part).count();
    let nth = split[..i].iter().filter(|p| p.0 == part).count() + 1;
    if same > 1 {
        format!("{part} {nth}")
    } else {
        part.to_string()
    }
}

/// A line's points per thread count, from one figure of each row.
fn by_threads(f: fn(&ResultRow) -> Option<f64>) -> impl Fn(&[&ResultRow]) -> Vec<(f64, f64)> {
    move |rows: &[&ResultRow]| -> Vec<(f64, f64)> {
        rows.iter()
            .filter_map(|r| Some((r.threads as f64, f(r)?)))
            .collect()
    }
}

/// What every plot of one group shares.
struct GroupPlots<'a> {
    /// The run's number among the report's runs.
    run: usize,
    /// The group's workload configuration.
    key: &'a str,
    /// The group's locks and their rows.
    all: Vec<LockRows<'a>>,
    /// The group's thread counts, ascending.
    threads: Vec<usize>,
    /// The highest of them.
    top: usize,
    /// The machine's CPUs (the linear reference's cap).
    cpus: usize,
}

impl GroupPlots<'_> {
    /// A plot's id.
    fn id(&self, what: &str) -> String {
        format!("run{}-{}-{what}", self.run, slug(self.key))
    }

    /// A lock's colour, the same in every plot of the group.
    fn hue(&self, name: &str) -> RGBColor {
        color(self.all.iter().position(|(n, _)| n == name).unwrap_or(0))
    }

    /// Our fastest lock over the fastest peer, if the group has both.
    fn summary(&self) -> Option<Result<Plot, String>> {
        let (k, threads) = (self.key, &self.threads);
        let ratio = ours_vs_peer(&self.all, threads);
        if ratio.is_empty() {
            return None;
        }
        let one = vec![
            (threads[0] as f64, 1.0),
            (*threads.last().unwrap_or(&1) as f64, 1.0),
        ];
        plot(
            Spec {
                id: self.id("summary"),
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
        )
    }

    /// The lines of `locks`, each in its lock's colour.
    fn lines(&self, locks: &[LockRows], points: &Points) -> Vec<Line> {
        let mut v = lines_of(locks, points);
        for l in &mut v {
            l.color = self.hue(&l.name);
        }
        v
    }

    /// Scaling, with the linear reference from the best 1-thread row.
    fn scaling_lines(&self, locks: &[LockRows]) -> Vec<Line> {
        let mut scaling = self.lines(locks, &by_threads(|r| Some(r.ops_per_sec.median)));
        let best1 = locks
            .iter()
            .filter_map(|(n, rows)| {
                rows.iter()
                    .find(|r| r.threads == 1)
                    .map(|r| (n, r.ops_per_sec.median))
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        if let Some((name, one)) = best1 {
            let cpus = self.cpus;
            scaling.push(Line {
                name: format!("linear (from {name} at 1 thread, capped at {cpus} CPUs)"),
                points: self
                    .threads
                    .iter()
                    .map(|&t| (t as f64, one * t.min(cpus.max(1)) as f64))
                    .collect(),
                stroke: Stroke::Dotted,
                color: RGBColor(120, 120, 120),
            });
        }
        scaling
    }

    /// Scaling, latency CDF, idle % and hand-over rate of one part of the group's locks.
    fn part_plots(&self, part: &str, locks: &[LockRows]) -> Vec<Result<Plot, String>> {
        let (k, top) = (self.key, self.top);
        let pid = |what: &str| {
            if part.is_empty() {
                self.id(what)
            } else {
                self.id(&format!("{what}-{}", slug(part)))
            }
        };
        let who = if part.is_empty() {
            String::new()
        } else {
            format!(" ({part})")
        };
        let scaling = self.scaling_lines(locks);
        // Latency CDF at the highest thread count, from the recorded histograms.
        let latency = self.lines(locks, &|rows: &[&ResultRow]| {
            rows.iter()
                .find(|r| r.threads == top)
                .map_or(vec![], |r| cdf(&r.acquire_ns.histogram))
        });
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
                &self.lines(locks, &by_threads(|r| Some(r.idle_pct))),
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
                &self.lines(locks, &by_threads(|r| r.handover_rate)),
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `advise`'s map as heat maps, one per read share: threads across, critical section up, each cell
/// coloured by its winner and labelled with it and its margin.
pub(super) fn heat_maps(
    run: usize,
    grid: &crate::engine::advice::Grid,
    cells: &[crate::engine::advice::Cell],
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
