//! Inline SVG charts for the HTML report: line charts over concurrency, grouped and stacked bars,
//! and a heatmap, each with axes (units, ticks), a legend, and a `<title>` on every mark naming
//! the journal record behind it.
//!
//! Hand-written rather than `plotters`: plotters' SVG backend cannot attach a `<title>` child or a
//! class to a mark, and the report needs both (the tooltip that traces a number to its journal
//! record, and the classes the DOM test finds axes, series and legends by). The output is plain
//! text built from the data in one pass, so it is deterministic and small.

use std::fmt::Write;

/// Colour-blind-safe palette, one colour per series: Okabe and Ito's eight, then two of Paul
/// Tol's (wine, olive) so up to ten series never share a colour. Ordered so that the first six
/// (the step-time terms of the breakdown chart) are six clearly different hues: sky blue, the
/// nearest to the first blue, comes seventh.
pub const PALETTE: [&str; 10] =
    ["#0072b2", "#d55e00", "#009e73", "#cc79a7", "#e69f00", "#000000", "#56b4e9", "#f0e442", "#882255", "#999933"];

const W: f64 = 960.0;
const H: f64 = 380.0;
const LEFT: f64 = 78.0;
const RIGHT: f64 = 260.0;
const TOP: f64 = 36.0;
const BOTTOM: f64 = 56.0;

/// XML-escapes text for element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// A data mark: its position and its tooltip (the value and the journal record).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Concurrency (the x axis).
    pub x: f64,
    /// The value, in the y axis's unit.
    pub y: f64,
    /// The tooltip: the value in words and the journal record it comes from.
    pub title: String,
}

/// A line through marks.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The series' name (the legend's words unless the chart has its own legend).
    pub name: String,
    /// Its stroke and mark colour.
    pub color: &'static str,
    /// SVG stroke-dasharray, for a second dimension (a percentile) beside the colour.
    pub dash: Option<&'static str>,
    /// The points, in drawing order.
    pub marks: Vec<Mark>,
}

/// A labelled point marked on a chart (the saturation knee).
#[derive(Debug, Clone, PartialEq)]
pub struct Callout {
    /// Concurrency of the point.
    pub x: f64,
    /// Its value.
    pub y: f64,
    /// The words drawn above it ("knee c=64").
    pub label: String,
    /// The circle's and label's colour (its series').
    pub color: &'static str,
    /// The tooltip naming the record.
    pub title: String,
}

/// A legend entry: a swatch (colour, optional dash) and its name.
#[derive(Debug, Clone, PartialEq)]
pub struct LegendEntry {
    /// The entry's words.
    pub name: String,
    /// The swatch's colour.
    pub color: &'static str,
    /// The swatch's dash pattern (a line swatch), or none.
    pub dash: Option<&'static str>,
}

/// A line chart over concurrency (log2 x axis).
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// The chart's id (`data-chart`), e.g. `throughput`.
    pub name: String,
    /// What it shows, in a sentence (the SVG's title and accessible label).
    pub caption: String,
    /// The x axis's name with its unit.
    pub x_label: String,
    /// The y axis's name with its unit.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// Points marked with a circle and a label.
    pub callouts: Vec<Callout>,
    /// The legend, when it is not one entry per series (colour for the experiment, dash for the
    /// percentile).
    pub legend: Option<Vec<LegendEntry>>,
    /// A logarithmic y axis (powers of ten), for values that span decades: a TTFT p50 of 40 ms
    /// stays readable beside a p99 of 30 s. Values at or below zero are drawn at the axis' floor.
    pub log_y: bool,
}

/// "Nice" tick values covering 0..=max (1, 2 or 5 times a power of ten apart).
pub fn ticks(max: f64) -> Vec<f64> {
    let max = if max > 0.0 && max.is_finite() { max } else { 1.0 };
    let raw = max / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let n = (max / step).ceil() as usize;
    (0..=n).map(|i| i as f64 * step).collect()
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn open_svg(o: &mut String, kind: &str, name: &str, caption: &str) {
    let _ = write!(
        o,
        r#"<svg class="chart" data-chart="{}" data-kind="{kind}" viewBox="0 0 {W} {H}" role="img" aria-label="{}" xmlns="http://www.w3.org/2000/svg"><title>{}</title>"#,
        esc(name),
        esc(caption),
        esc(caption)
    );
}

/// Tick values for a log10 axis over `lo..=hi` (both > 0): every power of ten from below `lo` to
/// above `hi`, with 2x and 5x steps between when the span is three decades or less.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let lo = if lo > 0.0 && lo.is_finite() { lo } else { 1.0 };
    let hi = if hi > lo && hi.is_finite() { hi } else { lo * 10.0 };
    let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil().max(lo.log10().floor() + 1.0) as i32);
    let steps: &[f64] = if b - a <= 3 { &[1.0, 2.0, 5.0] } else { &[1.0] };
    let mut out = Vec::new();
    for e in a..=b {
        for m in steps {
            let v = m * 10f64.powi(e);
            if v <= 10f64.powi(b) {
                out.push(v);
            }
        }
    }
    out
}

/// The y axis: line, ticks with gridlines (each at `y(value)`), and its label with the unit.
fn y_axis(o: &mut String, ticks: &[f64], y: &dyn Fn(f64) -> f64, label: &str) {
    let plot_h = H - TOP - BOTTOM;
    o.push_str(r#"<g class="axis y">"#);
    let _ = write!(o, r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="#333"/>"##, H - BOTTOM);
    for t in ticks {
        let yy = y(*t);
        let _ = write!(
            o,
            r##"<line class="grid" x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/><text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            yy + 4.0,
            num(*t)
        );
    }
    let _ = write!(
        o,
        r#"<text class="label" transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text></g>"#,
        TOP + plot_h / 2.0,
        esc(label)
    );
}

/// The x axis of a line chart: concurrency on a log2 scale, a tick at every measured value.
fn x_axis_log(o: &mut String, xs: &[f64], x: &dyn Fn(f64) -> f64, label: &str) {
    o.push_str(r#"<g class="axis x">"#);
    let _ = write!(o, r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#333"/>"##, H - BOTTOM, W - RIGHT);
    for v in xs {
        let xx = x(*v);
        let _ = write!(
            o,
            r##"<line x1="{xx:.1}" y1="{0}" x2="{xx:.1}" y2="{1}" stroke="#333"/><text class="tick" x="{xx:.1}" y="{2}" text-anchor="middle">{3}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 5.0,
            H - BOTTOM + 18.0,
            num(*v)
        );
    }
    let _ = write!(
        o,
        r#"<text class="label" x="{:.1}" y="{}" text-anchor="middle">{}</text></g>"#,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 12.0,
        esc(label)
    );
}

/// The legend of lines: one line swatch (colour and dash) and name per entry, right of the plot.
fn legend(o: &mut String, entries: &[LegendEntry]) {
    o.push_str(r#"<g class="legend">"#);
    for (i, LegendEntry { name, color, dash }) in entries.iter().enumerate() {
        let y = TOP + 8.0 + i as f64 * 20.0;
        let x = W - RIGHT + 16.0;
        let dash = dash.map_or(String::new(), |d| format!(r#" stroke-dasharray="{d}""#));
        let _ = write!(
            o,
            r#"<g class="legend-entry"><line x1="{x}" y1="{y}" x2="{:.1}" y2="{y}" stroke="{color}" stroke-width="3"{dash}/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
            x + 24.0,
            x + 30.0,
            y + 4.0,
            esc(name)
        );
    }
    o.push_str("</g>");
}

/// Renders a line chart.
pub fn line_chart(c: &LineChart, o: &mut String) {
    let mut xs: Vec<f64> = c.series.iter().flat_map(|s| s.marks.iter().map(|m| m.x)).filter(|x| *x > 0.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (lo, hi) = (xs.first().copied().unwrap_or(1.0).log2(), xs.last().copied().unwrap_or(2.0).log2());
    let span = if hi > lo { hi - lo } else { 1.0 };
    let plot_w = W - LEFT - RIGHT - 20.0;
    let x = move |v: f64| LEFT + 10.0 + plot_w * (v.max(f64::MIN_POSITIVE).log2() - lo) / span;
    let ys = || c.series.iter().flat_map(|s| s.marks.iter().map(|m| m.y));
    let plot_h = H - TOP - BOTTOM;
    let (ts, y): (Vec<f64>, Box<dyn Fn(f64) -> f64>) = if c.log_y {
        let ts = log_ticks(ys().filter(|v| *v > 0.0).fold(f64::INFINITY, f64::min), ys().fold(0.0, f64::max));
        let (lo, hi) = (ts[0].log10(), ts[ts.len() - 1].log10());
        let span = if hi > lo { hi - lo } else { 1.0 };
        (ts, Box::new(move |v: f64| TOP + plot_h * (1.0 - (v.max(10f64.powf(lo)).log10() - lo) / span)))
    } else {
        let ts = ticks(ys().fold(0.0, f64::max) * 1.08);
        let top = ts.last().copied().unwrap_or(1.0);
        (ts, Box::new(move |v: f64| TOP + plot_h * (1.0 - v / top)))
    };
    open_svg(o, "line", &c.name, &c.caption);
    y_axis(o, &ts, &*y, &c.y_label);
    x_axis_log(o, &xs, &x, &c.x_label);
    for s in &c.series {
        let pts: Vec<String> = s.marks.iter().map(|m| format!("{:.1},{:.1}", x(m.x), y(m.y))).collect();
        let dash = s.dash.map_or(String::new(), |d| format!(r#" stroke-dasharray="{d}""#));
        let _ = write!(
            o,
            r#"<g class="series" data-series="{}"><polyline points="{}" fill="none" stroke="{}" stroke-width="2.5"{dash}/>"#,
            esc(&s.name),
            pts.join(" "),
            s.color
        );
        for m in &s.marks {
            let _ = write!(
                o,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{}"><title>{}</title></circle>"#,
                x(m.x),
                y(m.y),
                s.color,
                esc(&m.title)
            );
        }
        o.push_str("</g>");
    }
    for (i, k) in c.callouts.iter().enumerate() {
        let (cx, cy) = (x(k.x), y(k.y));
        // Knees at the same concurrency get their labels stacked, not drawn over each other.
        let above = c.callouts[..i].iter().filter(|p| p.x == k.x).count() as f64;
        let _ = write!(
            o,
            r##"<g class="callout"><circle cx="{cx:.1}" cy="{cy:.1}" r="8" fill="none" stroke="{0}" stroke-width="2"/><text x="{cx:.1}" y="{1:.1}" text-anchor="middle" fill="{0}">{2}</text><title>{3}</title></g>"##,
            k.color,
            cy - 13.0 - 14.0 * above,
            esc(&k.label),
            esc(&k.title)
        );
    }
    let entries = c
        .legend
        .clone()
        .unwrap_or_else(|| c.series.iter().map(|s| LegendEntry { name: s.name.clone(), color: s.color, dash: s.dash }).collect());
    legend(o, &entries);
    o.push_str("</svg>");
}

/// One bar segment: its series (index into [`BarChart::series`]), value and tooltip.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// Index into [`BarChart::series`]: the segment's colour and legend entry.
    pub series: usize,
    /// Its height, in the y axis's unit.
    pub value: f64,
    /// The tooltip: the value in words and the journal record.
    pub title: String,
}

/// A group of bars on the x axis (one experiment).
#[derive(Debug, Clone, PartialEq)]
pub struct Group {
    /// The words under the group.
    pub label: String,
    /// Its bars (side by side) or the parts of its one bar (stacked).
    pub segments: Vec<Segment>,
}

/// Bars: side by side, or stacked.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// The chart's id (`data-chart`), e.g. `breakdown`.
    pub name: String,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The x axis's name.
    pub x_label: String,
    /// The y axis's name with its unit.
    pub y_label: String,
    /// The series' names; series `i` is drawn in `PALETTE[i]`, so no two share a colour (up to
    /// the palette's ten).
    pub series: Vec<String>,
    /// The groups, left to right.
    pub groups: Vec<Group>,
    /// Segments stacked into one bar per group, else side by side.
    pub stacked: bool,
}

/// Renders a bar chart.
pub fn bar_chart(c: &BarChart, o: &mut String) {
    let ymax = c
        .groups
        .iter()
        .map(|g| if c.stacked { g.segments.iter().map(|s| s.value).sum() } else { g.segments.iter().map(|s| s.value).fold(0.0, f64::max) })
        .fold(0.0, f64::max)
        * 1.08;
    let ts = ticks(ymax);
    let top = ts.last().copied().unwrap_or(1.0);
    let plot_h = H - TOP - BOTTOM;
    let y = |v: f64| TOP + plot_h * (1.0 - v / top);
    let slot = (W - LEFT - RIGHT) / c.groups.len().max(1) as f64;
    open_svg(o, "bar", &c.name, &c.caption);
    y_axis(o, &ts, &y, &c.y_label);
    o.push_str(r#"<g class="axis x">"#);
    let _ = write!(o, r##"<line x1="{LEFT}" y1="{0}" x2="{1}" y2="{0}" stroke="#333"/>"##, H - BOTTOM, W - RIGHT);
    for (i, g) in c.groups.iter().enumerate() {
        let _ = write!(
            o,
            r#"<text class="tick" x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            LEFT + slot * (i as f64 + 0.5),
            H - BOTTOM + 18.0,
            esc(&g.label)
        );
    }
    let _ = write!(
        o,
        r#"<text class="label" x="{:.1}" y="{}" text-anchor="middle">{}</text></g>"#,
        LEFT + (W - LEFT - RIGHT) / 2.0,
        H - 12.0,
        esc(&c.x_label)
    );
    for (si, name) in c.series.iter().enumerate() {
        let color = PALETTE[si % PALETTE.len()];
        let _ = write!(o, r#"<g class="series" data-series="{}">"#, esc(name));
        for (gi, g) in c.groups.iter().enumerate() {
            let below: f64 = g.segments.iter().take_while(|s| s.series != si).map(|s| s.value).sum();
            for s in g.segments.iter().filter(|s| s.series == si) {
                let (bx, bw, base) = if c.stacked {
                    (LEFT + slot * gi as f64 + slot * 0.2, slot * 0.6, below)
                } else {
                    let n = c.series.len().max(1) as f64;
                    (LEFT + slot * gi as f64 + slot * 0.15 + slot * 0.7 / n * si as f64, slot * 0.7 / n, 0.0)
                };
                let _ = write!(
                    o,
                    r#"<rect x="{bx:.1}" y="{:.1}" width="{bw:.1}" height="{:.1}" fill="{color}"><title>{}</title></rect>"#,
                    y(base + s.value),
                    (y(base) - y(base + s.value)).max(0.0),
                    esc(&s.title)
                );
            }
        }
        o.push_str("</g>");
    }
    // Bars get square swatches, not line symbols.
    o.push_str(r#"<g class="legend">"#);
    for (i, n) in c.series.iter().enumerate() {
        swatch(o, W - RIGHT + 16.0, i, PALETTE[i % PALETTE.len()], n);
    }
    o.push_str("</g></svg>");
}

/// A square matrix of categorical cells (e.g. P2P status OK / NS), coloured by a legend.
#[derive(Debug, Clone, PartialEq)]
pub struct Heatmap {
    /// The chart's id (`data-chart`).
    pub name: String,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The column axis's name.
    pub x_label: String,
    /// The row axis's name.
    pub y_label: String,
    /// Row and column labels (GPU indices).
    pub labels: Vec<String>,
    /// `rows[i][j]`: the category of the pair from row `i` to column `j`.
    pub rows: Vec<Vec<String>>,
    /// Each category with its colour and meaning, in legend order.
    pub categories: Vec<(String, &'static str, String)>,
    /// Tooltip suffix naming the record.
    pub record: String,
}

/// Renders a heatmap.
pub fn heatmap(c: &Heatmap, o: &mut String) {
    let n = c.labels.len().max(1) as f64;
    let cell = ((H - TOP - BOTTOM) / n).min((W - LEFT - RIGHT) / n);
    open_svg(o, "heatmap", &c.name, &c.caption);
    matrix_axes(o, &c.labels, cell, &c.x_label, &c.y_label);
    o.push_str(r#"<g class="series" data-series="cells">"#);
    for (i, row) in c.rows.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            let color = c.categories.iter().find(|(k, _, _)| k == v).map_or("#bbbbbb", |(_, col, _)| col);
            let _ = write!(
                o,
                r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{color}" stroke="#fff"><title>GPU{} to GPU{}: {} ({})</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" class="cell">{}</text>"##,
                LEFT + cell * j as f64,
                TOP + cell * i as f64,
                cell,
                cell,
                esc(c.labels.get(i).map_or("", String::as_str)),
                esc(c.labels.get(j).map_or("", String::as_str)),
                esc(v),
                esc(&c.record),
                LEFT + cell * (j as f64 + 0.5),
                TOP + cell * (i as f64 + 0.6),
                esc(v)
            );
        }
    }
    o.push_str(r#"</g><g class="legend">"#);
    for (i, (k, color, meaning)) in c.categories.iter().enumerate() {
        swatch(o, LEFT + cell * n + 30.0, i, color, &format!("{k} = {meaning}"));
    }
    o.push_str("</g></svg>");
}

/// Sequential colour steps (viridis at 0, 1/4, 1/2, 3/4, 1: perceptually even and readable by
/// colour-blind readers), dark for the low end; with the text colour that reads on each.
const STEPS: [(&str, &str); 5] =
    [("#440154", "#ffffff"), ("#3b528b", "#ffffff"), ("#21918c", "#ffffff"), ("#5ec962", "#000000"), ("#fde725", "#000000")];
/// The colour of a GPU's copy to itself (a local copy, not a link).
const SELF_COLOR: &str = "#d9d9d9";

/// A square matrix of measured values (bandwidth in GB/s, latency in us) between GPUs, each cell
/// coloured by its step of a sequential scale over the GPU-to-GPU pairs and labelled with its value.
#[derive(Debug, Clone, PartialEq)]
pub struct ValueHeatmap {
    /// The chart's id (`data-chart`).
    pub name: String,
    /// What it shows, in a sentence.
    pub caption: String,
    /// The column axis's name.
    pub x_label: String,
    /// The row axis's name.
    pub y_label: String,
    /// Row and column labels (GPU indices).
    pub labels: Vec<String>,
    /// values[i][j]: from GPU i to GPU j; `None` where not measured.
    pub values: Vec<Vec<Option<f64>>>,
    /// `GB/s` or `us`.
    pub unit: String,
    /// What a value is, for the tooltip (e.g. "unidirectional bandwidth at 256 MiB").
    pub what: String,
    /// Tooltip suffix naming the record.
    pub record: String,
    /// The values the colour scale spans: these cells' pairs and those of the heatmaps drawn
    /// beside it (another environment), so the same colour means the same value in each.
    pub scale: Vec<f64>,
    /// Larger values are better (bandwidth); the bright end of the scale is the better one.
    pub higher_is_better: bool,
}

/// The values of `values` off the diagonal (GPU pairs, not a GPU's copy to itself).
pub fn pair_values(values: &[Vec<Option<f64>>]) -> Vec<f64> {
    values.iter().enumerate().flat_map(|(i, r)| r.iter().enumerate().filter(move |(j, _)| *j != i).filter_map(|(_, v)| *v)).collect()
}

/// The scale's steps over `pairs`: `(low, high)` bounds of each, low values first.
fn value_steps(pairs: &[f64]) -> Vec<(f64, f64)> {
    let lo = pairs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = pairs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if pairs.is_empty() {
        return Vec::new();
    }
    if hi - lo <= hi.abs() * 1e-9 {
        return vec![(lo, hi)];
    }
    let w = (hi - lo) / STEPS.len() as f64;
    (0..STEPS.len()).map(|k| (lo + w * k as f64, if k + 1 == STEPS.len() { hi } else { lo + w * (k + 1) as f64 })).collect()
}

fn step_of(steps: &[(f64, f64)], v: f64) -> usize {
    steps.iter().position(|(_, hi)| v <= *hi).unwrap_or(steps.len().saturating_sub(1))
}

/// The colour and text colour of step `k` (low values first) of `n`: bright is better (one step
/// takes the middle colour).
fn step_color(k: usize, n: usize, higher_is_better: bool) -> (&'static str, &'static str) {
    let last = STEPS.len() - 1;
    if n <= 1 {
        STEPS[STEPS.len() / 2]
    } else if higher_is_better {
        STEPS[k.min(last)]
    } else {
        STEPS[last - k.min(last)]
    }
}

/// The heatmap's axes: GPU labels down the left and along the bottom, with the axis names.
fn matrix_axes(o: &mut String, labels: &[String], cell: f64, x_label: &str, y_label: &str) {
    let n = labels.len().max(1) as f64;
    o.push_str(r#"<g class="axis y">"#);
    for (i, l) in labels.iter().enumerate() {
        let _ = write!(
            o,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 6.0,
            TOP + cell * (i as f64 + 0.6),
            esc(l)
        );
    }
    let _ = write!(
        o,
        r#"<text class="label" transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text></g><g class="axis x">"#,
        TOP + cell * n / 2.0,
        esc(y_label)
    );
    for (j, l) in labels.iter().enumerate() {
        let _ = write!(
            o,
            r#"<text class="tick" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            LEFT + cell * (j as f64 + 0.5),
            TOP + cell * n + 16.0,
            esc(l)
        );
    }
    let _ = write!(
        o,
        r#"<text class="label" x="{:.1}" y="{:.1}" text-anchor="middle">{}</text></g>"#,
        LEFT + cell * n / 2.0,
        TOP + cell * n + 36.0,
        esc(x_label)
    );
}

/// Renders a heatmap of measured values, with a legend of the scale's steps in the unit.
pub fn value_heatmap(c: &ValueHeatmap, o: &mut String) {
    let n = c.labels.len().max(1) as f64;
    let cell = ((H - TOP - BOTTOM) / n).min((W - LEFT - RIGHT) / n);
    let steps = value_steps(&c.scale);
    open_svg(o, "heatmap", &c.name, &c.caption);
    matrix_axes(o, &c.labels, cell, &c.x_label, &c.y_label);
    o.push_str(r#"<g class="series" data-series="cells">"#);
    let label = |i: usize| c.labels.get(i).map_or("", String::as_str);
    for (i, row) in c.values.iter().enumerate() {
        for (j, v) in row.iter().enumerate() {
            let Some(v) = *v else { continue };
            let (fill, ink) =
                if i == j { (SELF_COLOR, "#000000") } else { step_color(step_of(&steps, v), steps.len(), c.higher_is_better) };
            let whose = if i == j {
                format!("GPU{} to itself (a local copy, not a link)", label(i))
            } else {
                format!("GPU{} to GPU{}", label(i), label(j))
            };
            let _ = write!(
                o,
                r##"<rect x="{:.1}" y="{:.1}" width="{cell:.1}" height="{cell:.1}" fill="{fill}" stroke="#fff"><title>{}: {} {} {} ({})</title></rect><text x="{:.1}" y="{:.1}" text-anchor="middle" class="cell" fill="{ink}">{}</text>"##,
                LEFT + cell * j as f64,
                TOP + cell * i as f64,
                esc(&whose),
                esc(&c.what),
                esc(&crate::report::measured_words(v)),
                esc(&c.unit),
                esc(&c.record),
                LEFT + cell * (j as f64 + 0.5),
                TOP + cell * (i as f64 + 0.6),
                esc(&crate::report::measured_words(v))
            );
        }
    }
    o.push_str(r#"</g><g class="legend">"#);
    let words = crate::report::measured_words;
    let mut entries: Vec<(&str, String)> = steps
        .iter()
        .enumerate()
        .map(|(k, (lo, hi))| {
            let text = if steps.len() == 1 {
                format!("{} {} (every pair)", words(*lo), c.unit)
            } else {
                format!("{} to {} {}", words(*lo), words(*hi), c.unit)
            };
            (step_color(k, steps.len(), c.higher_is_better).0, text)
        })
        .collect();
    entries.push((SELF_COLOR, "same GPU (local copy)".into()));
    for (i, (color, text)) in entries.iter().enumerate() {
        swatch(o, LEFT + cell * n + 30.0, i, color, text);
    }
    o.push_str("</g></svg>");
}

/// The `i`-th entry of a heatmap's legend at `x`: a colour square and its words.
fn swatch(o: &mut String, x: f64, i: usize, color: &str, text: &str) {
    let y = TOP + 8.0 + i as f64 * 22.0;
    let _ = write!(
        o,
        r#"<g class="legend-entry"><rect x="{x:.1}" y="{:.1}" width="16" height="16" fill="{color}"/><text x="{:.1}" y="{:.1}">{}</text></g>"#,
        y - 8.0,
        x + 22.0,
        y + 4.0,
        esc(text)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_axis_keeps_a_small_p50_off_the_floor() {
        assert_eq!(log_ticks(40.0, 900.0), vec![10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0]);
        assert_eq!(log_ticks(40.0, 30_000.0), vec![10.0, 100.0, 1000.0, 10_000.0, 100_000.0]);
        let series = |name: &str, y: f64| Series {
            name: name.into(),
            color: PALETTE[0],
            dash: None,
            marks: vec![Mark { x: 1.0, y, title: String::new() }, Mark { x: 8.0, y, title: String::new() }],
        };
        let mut c = LineChart {
            name: "ttft".into(),
            caption: "TTFT".into(),
            x_label: "concurrency".into(),
            y_label: "TTFT (ms)".into(),
            series: vec![series("p50", 40.0), series("p99", 30_000.0)],
            callouts: vec![],
            legend: None,
            log_y: true,
        };
        let p50_height = |c: &LineChart| {
            let mut o = String::new();
            line_chart(c, &mut o);
            let at = o.find(r#"data-series="p50""#).expect("p50 series");
            let cy: f64 = o[at..].split("cy=\"").nth(1).and_then(|s| s.split('"').next()).and_then(|s| s.parse().ok()).expect("cy");
            (H - BOTTOM) - cy
        };
        let log = p50_height(&c);
        c.log_y = false;
        let linear = p50_height(&c);
        assert!(linear < 1.0, "on a linear axis set by the p99 the p50 lies on the floor: {linear}");
        assert!(log > (H - TOP - BOTTOM) * 0.1, "on the log axis the p50 (a decade above the axis floor of 10 ms) is off the floor: {log}");
    }

    #[test]
    fn bar_legends_are_swatches_one_distinct_colour_per_series() {
        let names = ["weights", "KV cache", "compute", "communication", "overhead", "prefill"];
        let c = BarChart {
            name: "breakdown".into(),
            caption: "step".into(),
            x_label: "experiment".into(),
            y_label: "ms".into(),
            series: names.iter().map(|s| s.to_string()).collect(),
            groups: vec![Group {
                label: "exp 1".into(),
                segments: (0..names.len()).map(|i| Segment { series: i, value: 1.0, title: String::new() }).collect(),
            }],
            stacked: true,
        };
        let mut o = String::new();
        bar_chart(&c, &mut o);
        let legend = &o[o.find(r#"<g class="legend">"#).expect("legend")..];
        assert_eq!(legend.matches("<rect").count(), names.len(), "a square swatch per term: {legend}");
        assert!(!legend.contains("<line"), "no line symbols for bars: {legend}");
        let fills: std::collections::BTreeSet<&str> = legend.split("fill=\"").skip(1).filter_map(|s| s.split('"').next()).collect();
        assert_eq!(fills.len(), names.len(), "every term its own colour: {fills:?}");
    }

    #[test]
    fn ticks_are_round_and_cover_the_maximum() {
        assert_eq!(ticks(880.0), vec![0.0, 200.0, 400.0, 600.0, 800.0, 1000.0]);
        assert_eq!(ticks(4.2), vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0]);
        assert_eq!(ticks(0.0).len(), 6, "an empty chart still gets a 0..1 axis");
    }

    #[test]
    fn value_heatmap_steps_span_the_pairs_and_cells_name_their_record() {
        let values = vec![
            vec![Some(1483.0), Some(29.4), Some(53.8)],
            vec![Some(29.4), Some(1483.0), None],
            vec![Some(53.8), Some(40.0), Some(1483.0)],
        ];
        let values = &values;
        let steps = value_steps(&pair_values(values));
        assert_eq!(steps.len(), STEPS.len());
        assert_eq!((steps[0].0, steps[STEPS.len() - 1].1), (29.4, 53.8), "the diagonal (local copies) is left out of the scale");
        assert_eq!(value_steps(&pair_values(&[vec![Some(1.0), Some(29.4)], vec![Some(29.4), Some(1.0)]])), vec![(29.4, 29.4)]);
        assert_eq!(step_color(0, 5, true), STEPS[0]);
        assert_eq!(step_color(0, 5, false), STEPS[4], "a low latency is the bright, better end");
        let c = ValueHeatmap {
            name: "fabric-bandwidth".into(),
            caption: "bandwidth".into(),
            x_label: "to GPU".into(),
            y_label: "from GPU".into(),
            labels: vec!["0".into(), "1".into(), "2".into()],
            values: values.clone(),
            unit: "GB/s".into(),
            what: "unidirectional bandwidth".into(),
            record: "fabric record 4".into(),
            scale: pair_values(values),
            higher_is_better: true,
        };
        let mut o = String::new();
        value_heatmap(&c, &mut o);
        assert!(o.contains("<title>GPU0 to GPU2: unidirectional bandwidth 53.8 GB/s (fabric record 4)</title>"), "{o}");
        assert!(o.contains("29.4 to 34.3 GB/s") && o.contains("same GPU (local copy)"), "{o}");
        assert_eq!(o.matches("<rect").count(), 8 + STEPS.len() + 1, "8 measured cells (one is not measured) and the legend's swatches");
    }

    #[test]
    fn marks_carry_their_record_and_text_is_escaped() {
        let c = LineChart {
            name: "t".into(),
            caption: "a <b> & c".into(),
            x_label: "concurrency".into(),
            y_label: "output tok/s".into(),
            series: vec![Series {
                name: "exp 1".into(),
                color: PALETTE[0],
                dash: None,
                marks: vec![
                    Mark { x: 1.0, y: 10.0, title: "experiment 1, c=1".into() },
                    Mark { x: 8.0, y: 50.0, title: "experiment 1, c=8".into() },
                ],
            }],
            callouts: vec![],
            legend: None,
            log_y: false,
        };
        let mut o = String::new();
        line_chart(&c, &mut o);
        assert!(o.contains("<title>experiment 1, c=8</title>"), "{o}");
        assert!(o.contains("a &lt;b&gt; &amp; c"));
        assert!(!o.contains("<b>"));
        for class in [r#"class="axis x""#, r#"class="axis y""#, r#"class="series""#, r#"class="legend""#] {
            assert!(o.contains(class), "{class}");
        }
    }
}
