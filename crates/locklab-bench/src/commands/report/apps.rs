//! The page's real-programs section: per app and thread count, each lock's throughput as a ratio
//! to glibc (bars with min..max whiskers) and its busiest call sites.

use super::*;

/// One `(app, threads)` group of `apps` rows, glibc first as the lab writes them.
pub(super) fn app_groups(
    rows: &[serde_json::Value],
) -> Vec<(String, u64, Vec<&serde_json::Value>)> {
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

/// `4 threads`, or for a `try` row (0) the program's own.
fn threads_text(threads: u64) -> String {
    if threads == 0 {
        "its own threads".into()
    } else {
        format!("{threads} threads")
    }
}

/// An app's bars: each lock's median throughput as a ratio to glibc's median, with whiskers from
/// its slowest to its fastest run (also over glibc's median), and the 1.0 line.
pub(super) fn app_chart(
    app: &str,
    threads: u64,
    rows: &[&serde_json::Value],
) -> Result<String, String> {
    let glibc = rows
        .iter()
        .find(|r| r["lock"] == "glibc")
        .and_then(|r| r["median"].as_f64())
        .filter(|&m| m > 0.0)
        .ok_or_else(|| format!("{app}: no glibc row"))?;
    // `try` rows of wall time (lower is better) are drawn as speed-ups, like throughputs: glibc's
    // time over the row's, the fastest run as the top whisker. A row without runs (it failed) has
    // no bar.
    let speed = |r: &serde_json::Value, k: &str| {
        let v = r[k].as_f64().unwrap_or(0.0);
        if v <= 0.0 {
            0.0
        } else if r["higher_is_better"] == false {
            glibc / v
        } else {
            v / glibc
        }
    };
    let bars: Vec<(String, f64, f64, f64)> = rows
        .iter()
        .map(|r| {
            let (lo, hi) = if r["higher_is_better"] == false {
                ("max", "min")
            } else {
                ("min", "max")
            };
            (
                r["lock"].as_str().unwrap_or("?").to_string(),
                speed(r, "median"),
                speed(r, lo),
                speed(r, hi),
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
                format!("{app}, {}: speed / glibc's", threads_text(threads)),
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
pub(super) fn apps_section(
    h: &mut String,
    run: usize,
    rows: &[serde_json::Value],
) -> anyhow::Result<usize> {
    let mut plots = 0;
    h.push_str("<h3>Real programs (apps): glibc's locks and ours, side by side</h3>\n");
    for (app, threads, group) in app_groups(rows) {
        let svg = app_chart(&app, threads, &group)
            .map_err(|e| anyhow::anyhow!("report: cannot draw a plot: {e}"))?;
        let p = Plot {
            id: format!("run{run}-apps-{}-{threads}", slug(&app)),
            caption: format!(
                "{app} at {}: each lock's median speed over glibc's (higher is better), whiskers from the slowest to the fastest run.",
                threads_text(threads)
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
                                crate::external::lockstat::ns_text(
                                    t["wait_ns_total"].as_u64().unwrap_or(0)
                                )
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
