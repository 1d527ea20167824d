//! Drawing one chart: lines, strokes (ours solid, peers dashed, baselines dotted), colours, axes and
//! the legend, into inline SVG with plotters.

use super::*;

/// A plot: its id, caption, the SVG, and the legend's (name, colour, stroke) entries.
pub(super) struct Plot {
    pub(super) id: String,
    pub(super) caption: String,
    pub(super) svg: String,
    pub(super) legend: Vec<(String, RGBColor, Stroke)>,
}

/// How a line is drawn: ours solid, peers dashed, baselines and references dotted.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Stroke {
    Solid,
    Dashed,
    Dotted,
    /// A filled area (the heat maps' cells), in legends only.
    Fill,
}

impl Stroke {
    /// The stroke of a lock's line, by whose lock it is.
    pub(super) fn of(lock: &str) -> Stroke {
        match crate::locks::find(lock).map(|l| l.kind) {
            Some(crate::locks::Kind::Ours) => Stroke::Solid,
            Some(crate::locks::Kind::Baseline) => Stroke::Dotted,
            _ => Stroke::Dashed,
        }
    }

    /// The legend swatch's CSS.
    pub(super) fn css(self) -> &'static str {
        match self {
            Stroke::Solid => "solid",
            Stroke::Dashed => "dashed",
            Stroke::Dotted => "dotted",
            Stroke::Fill => "solid",
        }
    }
}

/// One line of a chart.
pub(super) struct Line {
    pub(super) name: String,
    pub(super) points: Vec<(f64, f64)>,
    pub(super) stroke: Stroke,
    pub(super) color: RGBColor,
}

/// Ten colours that stay apart (Tableau 10), then the palette's others.
pub(super) fn color(i: usize) -> RGBColor {
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
pub(super) const MAX_LINES: usize = 8;

pub(super) const W: u32 = 570;
pub(super) const H: u32 = 360;
/// Room right of the plot area for the lines' end labels.
pub(super) const LABEL_W: u32 = 110;

/// Compact axis numbers: 1.2M, 350k, 12.5.
pub(super) fn human(v: f64) -> String {
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
pub(super) fn chart(
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
