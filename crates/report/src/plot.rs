//! Plots: a [`Plotter`] turns a [`Plot`] of the view model into markup, so
//! that how plots are drawn can change without touching the report logic.
//!
//! [`SvgPlotter`] writes one self-contained `<svg>` element (inline in the
//! HTML report: no script, no external font, no image file). It draws the
//! SVG itself rather than through `plotters`: without a font backend
//! (`ttf`, which needs fontconfig and freetype) `plotters` cannot measure
//! text, while SVG `<text>` with `text-anchor` lets the browser lay labels
//! out; drawing by hand also gives binary size ticks (4K, 64K, 1M, 4G), time
//! ticks with units (100 ns, 1 µs) and byte-identical output for snapshots.
//!
//! The axis logic ([`ticks`], [`Ticks::fraction`]) is separate from the
//! drawing and unit-tested.

use std::fmt::Write;

use crate::text::format;
/// Escape text for XML and HTML content and attribute values.
pub use crate::text::table::html_escape as escape;
use crate::view::{Plot, Point, Scale, Series, Unit, Verdict};

/// Draws a plot.
pub trait Plotter {
    /// One plot as markup that can be inlined in an HTML page.
    fn plot(&self, plot: &Plot) -> String;
}

/// Colour-blind-safe palette (Okabe and Ito), then darker extras.
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#882255", "#444444",
];

/// The colour of palette index `i`.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// One labelled tick.
#[derive(Clone, Debug, PartialEq)]
pub struct Tick {
    pub value: f64,
    pub label: String,
}

/// A resolved axis: the domain drawn, labelled ticks and unlabelled ones.
#[derive(Clone, Debug, PartialEq)]
pub struct Ticks {
    pub scale: Scale,
    pub lo: f64,
    pub hi: f64,
    pub major: Vec<Tick>,
    pub minor: Vec<f64>,
}

impl Ticks {
    /// Where `v` falls on the axis, 0 at `lo` and 1 at `hi` (outside [0, 1]
    /// when `v` is outside the domain; `None` for a non-positive value on a
    /// log axis).
    pub fn fraction(&self, v: f64) -> Option<f64> {
        match self.scale {
            Scale::Linear => Some((v - self.lo) / (self.hi - self.lo)),
            Scale::Log2 | Scale::Log10 => (v > 0.0 && v.is_finite())
                .then(|| (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())),
        }
    }
}

/// Tick label for `v` in `unit`; `decimals` applies to [`Unit::Ratio`].
pub fn tick_label(v: f64, unit: Unit, decimals: usize) -> String {
    match unit {
        Unit::Bytes => format::bytes(v),
        Unit::Nanoseconds => format::nanos(v),
        Unit::Instructions => format::instructions(v),
        Unit::Ratio => format!("{v:.decimals$}"),
    }
}

/// The axis for data spanning `lo..=hi` (plus `include`, e.g. the 1.0
/// reference of a ratio plot).
///
/// - [`Scale::Log2`]: whole octaves; ticks every 1, 2 or more octaves so
///   that at most 11 are labelled, anchored on 4K (a 4K..4G axis is labelled
///   4K, 16K, 64K, ..., 1G, 4G); the other octaves are minor ticks.
/// - [`Scale::Log10`]: up to two decades get 1-2-5 ticks and a domain
///   snapped to them; wider ranges snap to decades with 2..9 minor ticks.
/// - [`Scale::Linear`]: 1, 2, 2.5 or 5 times a power of ten, about six
///   ticks, 5% padding.
pub fn ticks(scale: Scale, unit: Unit, lo: f64, hi: f64, include: Option<f64>) -> Ticks {
    let (mut lo, mut hi) = (lo.min(hi), lo.max(hi));
    if let Some(v) = include {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    match scale {
        Scale::Log2 => log2_ticks(unit, lo, hi),
        Scale::Log10 => log10_ticks(unit, lo, hi),
        Scale::Linear => linear_ticks(unit, lo, hi),
    }
}

/// Exponent anchoring the octave ticks: 2^12 = 4K.
const LOG2_ANCHOR: i32 = 12;

fn log2_ticks(unit: Unit, lo: f64, hi: f64) -> Ticks {
    let (lo, hi) = positive_range(lo, hi);
    let mut lo_e = lo.log2().floor() as i32;
    let mut hi_e = hi.log2().ceil() as i32;
    if hi_e == lo_e {
        lo_e -= 1;
        hi_e += 1;
    }
    let octaves = hi_e - lo_e;
    let step = match octaves {
        0..=10 => 1,
        11..=22 => 2,
        n => (n + 10) / 11,
    };
    power_ticks(Scale::Log2, unit, lo_e, hi_e, LOG2_ANCHOR, step, false)
}

/// Ticks at the powers `base^e` of the scale's base for `e` from `lo_e` to
/// `hi_e`, both widened to the step: major where `e - anchor` is a multiple
/// of `step`, minor elsewhere; with `subdivide` and a step of 1, minor ticks
/// also at 2 to 9 times each major one below the top.
fn power_ticks(
    scale: Scale,
    unit: Unit,
    mut lo_e: i32,
    mut hi_e: i32,
    anchor: i32,
    step: i32,
    subdivide: bool,
) -> Ticks {
    let base: f64 = if scale == Scale::Log2 { 2.0 } else { 10.0 };
    lo_e -= (lo_e - anchor).rem_euclid(step);
    hi_e += (anchor - hi_e).rem_euclid(step);
    let mut major = Vec::new();
    let mut minor = Vec::new();
    for e in lo_e..=hi_e {
        let v = base.powi(e);
        if (e - anchor).rem_euclid(step) == 0 {
            major.push(Tick {
                value: v,
                label: tick_label(v, unit, 0),
            });
            if subdivide && step == 1 && e < hi_e {
                minor.extend((2..=9).map(|m| f64::from(m) * v));
            }
        } else {
            minor.push(v);
        }
    }
    Ticks {
        scale,
        lo: base.powi(lo_e),
        hi: base.powi(hi_e),
        major,
        minor,
    }
}

fn log10_ticks(unit: Unit, lo: f64, hi: f64) -> Ticks {
    let (lo, hi) = positive_range(lo, hi);
    let lo_e = lo.log10().floor() as i32;
    let mut hi_e = hi.log10().ceil() as i32;
    if hi_e == lo_e {
        hi_e += 1;
    }
    let decades = hi_e - lo_e;
    let mut major = Vec::new();
    let mut minor = Vec::new();
    let tick = |v: f64| Tick {
        value: v,
        label: tick_label(v, unit, 0),
    };
    if decades <= 2 {
        // 1-2-5 ticks; the domain snaps to the nearest of them around the data.
        let candidates: Vec<f64> = (lo_e..=hi_e)
            .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
            .collect();
        let dlo = candidates
            .iter()
            .copied()
            .filter(|v| *v <= lo * (1.0 + 1e-9))
            .fold(candidates[0], f64::max);
        let dhi = candidates
            .iter()
            .copied()
            .filter(|v| *v >= hi * (1.0 - 1e-9))
            .fold(f64::INFINITY, f64::min);
        for e in lo_e..=hi_e {
            for m in 1..=9 {
                let v = f64::from(m) * 10f64.powi(e);
                if v < dlo * (1.0 - 1e-9) || v > dhi * (1.0 + 1e-9) {
                    continue;
                }
                if matches!(m, 1 | 2 | 5) {
                    major.push(tick(v));
                } else {
                    minor.push(v);
                }
            }
        }
        return Ticks {
            scale: Scale::Log10,
            lo: dlo,
            hi: dhi,
            major,
            minor,
        };
    }
    let step = (decades + 9) / 10;
    power_ticks(Scale::Log10, unit, lo_e, hi_e, 0, step, true)
}

fn linear_ticks(unit: Unit, lo: f64, hi: f64) -> Ticks {
    let (lo, hi) = if lo.is_finite() && hi.is_finite() {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    let span = if hi > lo {
        hi - lo
    } else if lo != 0.0 {
        lo.abs() * 0.2
    } else {
        1.0
    };
    let (lo, hi) = (lo - span * 0.05, hi + span * 0.05);
    let raw = (hi - lo) / 6.0;
    let mag = 10f64.powf(raw.log10().floor());
    let mantissa = [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .find(|m| m * mag >= raw * (1.0 - 1e-9))
        .unwrap_or(10.0);
    let step = mantissa * mag;
    let decimals = {
        let d = -(step.log10().floor()) as i32 + i32::from(mantissa == 2.5);
        d.max(0) as usize
    };
    let first = (lo / step).floor() as i64;
    let last = (hi / step).ceil() as i64;
    let major = (first..=last)
        .map(|i| {
            let v = i as f64 * step;
            Tick {
                value: v,
                label: tick_label(v, unit, decimals),
            }
        })
        .collect();
    Ticks {
        scale: Scale::Linear,
        lo: first as f64 * step,
        hi: last as f64 * step,
        major,
        minor: Vec::new(),
    }
}

/// A usable positive range for a log axis.
fn positive_range(lo: f64, hi: f64) -> (f64, f64) {
    if hi > 0.0 && hi.is_finite() {
        let lo = if lo > 0.0 && lo.is_finite() { lo } else { hi };
        (lo, hi)
    } else {
        (1.0, 10.0)
    }
}

/// Inline SVG plots with a legend on the right.
#[derive(Clone, Copy, Debug)]
pub struct SvgPlotter {
    pub width: f64,
    pub height: f64,
}

impl Default for SvgPlotter {
    fn default() -> SvgPlotter {
        SvgPlotter {
            width: 920.0,
            height: 430.0,
        }
    }
}

/// Margins around the plotting area: left, right (legend), top, bottom.
const MARGIN: (f64, f64, f64, f64) = (78.0, 230.0, 40.0, 58.0);

/// Every finite value of `pick` over the plot's points.
fn values(plot: &Plot, pick: impl Fn(&Point) -> [Option<f64>; 3], positive: bool) -> (f64, f64) {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for p in plot.series.iter().flat_map(|s| &s.points) {
        for v in pick(p).into_iter().flatten() {
            if v.is_finite() && (!positive || v > 0.0) {
                lo = lo.min(v);
                hi = hi.max(v);
            }
        }
    }
    (lo, hi)
}

fn is_log(s: Scale) -> bool {
    matches!(s, Scale::Log2 | Scale::Log10)
}

/// Value text for tooltips.
fn value_text(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Bytes => format::bytes(v),
        Unit::Nanoseconds => format::nanos(v),
        Unit::Instructions => format::instructions(v),
        Unit::Ratio => format!("{v:.3}"),
    }
}

impl Plotter for SvgPlotter {
    fn plot(&self, plot: &Plot) -> String {
        let (w, h) = (self.width, self.height);
        let (ml, mr, mt, mb) = MARGIN;
        let (pw, ph) = (w - ml - mr, h - mt - mb);
        let (xlo, xhi) = values(plot, |p| [Some(p.x), None, None], is_log(plot.x.scale));
        let (ylo, yhi) = values(plot, |p| [Some(p.y), p.lo, p.hi], is_log(plot.y.scale));
        let xt = ticks(plot.x.scale, plot.x.unit, xlo, xhi, None);
        let yt = ticks(plot.y.scale, plot.y.unit, ylo, yhi, plot.reference);
        let px = |v: f64| xt.fraction(v).map(|f| ml + f * pw);
        let py = |v: f64| yt.fraction(v).map(|f| mt + (1.0 - f) * ph);
        let id = escape(&plot.id);

        let mut s = String::new();
        writeln!(
            s,
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="plot" viewBox="0 0 {w} {h}" role="img" aria-labelledby="{id}-t" font-family="sans-serif" font-size="12">"#
        )
        .unwrap();
        writeln!(s, r#"<title id="{id}-t">{}</title>"#, escape(&plot.title)).unwrap();
        writeln!(
            s,
            r#"<defs><clipPath id="{id}-clip"><rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"/></clipPath></defs>"#,
            // Room for a marker on the edge of the domain.
            ml - 8.0,
            mt - 8.0,
            pw + 16.0,
            ph + 16.0
        )
        .unwrap();
        writeln!(
            s,
            r##"<rect x="0" y="0" width="{w}" height="{h}" fill="#fff"/>"##
        )
        .unwrap();
        writeln!(
            s,
            r#"<text x="{ml}" y="22" font-size="15" font-weight="bold">{}</text>"#,
            escape(&plot.title)
        )
        .unwrap();

        self.grid(&mut s, &xt, &yt, &px, &py);
        self.axes(&mut s, plot, &py);

        // Series: CI bands or error bars, lines, points.
        writeln!(s, r#"<g clip-path="url(#{id}-clip)">"#).unwrap();
        for series in &plot.series {
            self.series(&mut s, plot, series, &px, &py);
        }
        s.push_str("</g>\n");
        self.legend(&mut s, plot, w - mr + 16.0, mt);
        s.push_str("</svg>\n");
        s
    }
}

impl SvgPlotter {
    /// Minor and major grid lines with the tick labels.
    fn grid(
        &self,
        s: &mut String,
        xt: &Ticks,
        yt: &Ticks,
        px: &dyn Fn(f64) -> Option<f64>,
        py: &dyn Fn(f64) -> Option<f64>,
    ) {
        let (w, h) = (self.width, self.height);
        let (ml, mr, mt, mb) = MARGIN;
        let (pw, ph) = (w - ml - mr, h - mt - mb);
        s.push_str(r#"<g class="grid">"#);
        for v in &xt.minor {
            if let Some(x) = px(*v) {
                writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{mt}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/>"##,
                    mt + ph
                )
                .unwrap();
            }
        }
        for v in &yt.minor {
            if let Some(y) = py(*v) {
                writeln!(
                    s,
                    r##"<line x1="{ml}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#eee"/>"##,
                    ml + pw
                )
                .unwrap();
            }
        }
        for t in &xt.major {
            if let Some(x) = px(t.value) {
                writeln!(
                    s,
                    r##"<line x1="{x:.1}" y1="{mt}" x2="{x:.1}" y2="{:.1}" stroke="#ccc"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                    mt + ph + 5.0,
                    mt + ph + 19.0,
                    escape(&t.label)
                )
                .unwrap();
            }
        }
        for t in &yt.major {
            if let Some(y) = py(t.value) {
                writeln!(
                    s,
                    r##"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ccc"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
                    ml - 5.0,
                    ml + pw,
                    ml - 8.0,
                    y + 4.0,
                    escape(&t.label)
                )
                .unwrap();
            }
        }
        s.push_str("</g>\n");
    }

    /// The plot frame, the axis labels and the reference line.
    fn axes(&self, s: &mut String, plot: &Plot, py: &dyn Fn(f64) -> Option<f64>) {
        let (w, h) = (self.width, self.height);
        let (ml, mr, mt, mb) = MARGIN;
        let (pw, ph) = (w - ml - mr, h - mt - mb);
        writeln!(
            s,
            r##"<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="#555"/>"##
        )
        .unwrap();
        writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            ml + pw / 2.0,
            h - 12.0,
            escape(&plot.x.label)
        )
        .unwrap();
        writeln!(
            s,
            r#"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
            mt + ph / 2.0,
            escape(&plot.y.label)
        )
        .unwrap();
        if let Some(y) = plot.reference.and_then(py) {
            writeln!(
                s,
                r##"<line x1="{ml}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#222" stroke-width="1.2" stroke-dasharray="2 3"/>"##,
                ml + pw
            )
            .unwrap();
        }
    }

    fn series(
        &self,
        s: &mut String,
        plot: &Plot,
        series: &Series,
        px: &dyn Fn(f64) -> Option<f64>,
        py: &dyn Fn(f64) -> Option<f64>,
    ) {
        let c = color(series.color);
        let pts: Vec<(&Point, f64, f64)> = series
            .points
            .iter()
            .filter_map(|p| Some((p, px(p.x)?, py(p.y)?)))
            .collect();
        let bars = pts.iter().any(|(p, _, _)| p.marker.is_some());
        for segment in segments(&pts, &series.gaps) {
            self.segment(s, series, segment, bars, py);
        }
        for (p, x, y) in &pts {
            let mut tip = format!(
                "{}, {}: {}",
                series.label,
                value_text(p.x, plot.x.unit),
                value_text(p.y, plot.y.unit)
            );
            if let (Some(lo), Some(hi)) = (p.lo, p.hi) {
                write!(
                    tip,
                    " (95% CI {} to {})",
                    value_text(lo, plot.y.unit),
                    value_text(hi, plot.y.unit)
                )
                .unwrap();
            }
            if let Some(v) = p.marker {
                write!(tip, ", {}", v.text()).unwrap();
            }
            let shape = marker(p.marker, *x, *y, c, series.dashed);
            writeln!(s, "<g>{shape}<title>{}</title></g>", escape(&tip)).unwrap();
        }
    }

    /// One unbroken run of a series' points: its CI band or error bars, and
    /// its line.
    fn segment(
        &self,
        s: &mut String,
        series: &Series,
        pts: &[(&Point, f64, f64)],
        bars: bool,
        py: &dyn Fn(f64) -> Option<f64>,
    ) {
        let c = color(series.color);
        let bounded: Vec<(f64, f64, f64)> = pts
            .iter()
            .filter_map(|(p, x, _)| Some((*x, py(p.lo?)?, py(p.hi?)?)))
            .collect();
        if bars || bounded.len() < 2 {
            for (x, lo, hi) in &bounded {
                writeln!(
                    s,
                    r#"<path d="M{x:.1} {lo:.1}V{hi:.1}M{:.1} {lo:.1}h8M{:.1} {hi:.1}h8" stroke="{c}" stroke-width="1.2" fill="none"/>"#,
                    x - 4.0,
                    x - 4.0
                )
                .unwrap();
            }
        } else if !series.dashed {
            let mut d = String::new();
            for (i, (x, _, hi)) in bounded.iter().enumerate() {
                write!(d, "{}{x:.1} {hi:.1}", if i == 0 { "M" } else { "L" }).unwrap();
            }
            for (x, lo, _) in bounded.iter().rev() {
                write!(d, "L{x:.1} {lo:.1}").unwrap();
            }
            writeln!(
                s,
                r#"<path d="{d}Z" fill="{c}" fill-opacity="0.15" stroke="none"/>"#
            )
            .unwrap();
        }
        if pts.len() > 1 {
            let line: Vec<String> = pts
                .iter()
                .map(|(_, x, y)| format!("{x:.1},{y:.1}"))
                .collect();
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{c}" stroke-width="2"{dash}/>"#,
                line.join(" ")
            )
            .unwrap();
        }
    }

    fn legend(&self, s: &mut String, plot: &Plot, x: f64, top: f64) {
        let mut y = top + 8.0;
        for series in &plot.series {
            let c = color(series.color);
            let dash = if series.dashed {
                r#" stroke-dasharray="6 4""#
            } else {
                ""
            };
            writeln!(
                s,
                r#"<line x1="{x}" y1="{y}" x2="{:.1}" y2="{y}" stroke="{c}" stroke-width="2"{dash}/>{}<text x="{:.1}" y="{:.1}">{}</text>"#,
                x + 26.0,
                marker(None, x + 13.0, y, c, series.dashed),
                x + 34.0,
                y + 4.0,
                escape(&series.label)
            )
            .unwrap();
            y += 20.0;
        }
        let points = || plot.series.iter().flat_map(|s| &s.points);
        if points().any(|p| p.marker.is_some()) {
            y += 8.0;
            for v in [
                Verdict::Regression,
                Verdict::Improvement,
                Verdict::NoChange,
                Verdict::NotComparable,
            ]
            .into_iter()
            .filter(|v| points().any(|p| p.marker == Some(*v)))
            {
                let what = match v {
                    Verdict::Regression => "regression (slower)",
                    Verdict::Improvement => "improvement (faster)",
                    other => other.text(),
                };
                writeln!(
                    s,
                    r#"{}<text x="{:.1}" y="{:.1}">{what}</text>"#,
                    marker(Some(v), x + 13.0, y, "#333", false),
                    x + 34.0,
                    y + 4.0
                )
                .unwrap();
                y += 20.0;
            }
            y += 4.0;
            writeln!(
                s,
                r##"<text x="{x}" y="{y:.1}" fill="#555">bars: 95% bootstrap CI</text>"##
            )
            .unwrap();
            y += 16.0;
            if let Some(r) = plot.reference {
                writeln!(
                    s,
                    r##"<text x="{x}" y="{y:.1}" fill="#555">dotted: {r} = baseline</text>"##
                )
                .unwrap();
            }
        } else if points().any(|p| p.lo.is_some()) {
            y += 8.0;
            writeln!(
                s,
                r##"<text x="{x}" y="{y:.1}" fill="#555">shaded: 95% CI of the median</text>"##
            )
            .unwrap();
            if plot.series.iter().any(|s| s.dashed) {
                writeln!(
                    s,
                    r##"<text x="{x}" y="{:.1}" fill="#555">dashed: baseline run</text>"##,
                    y + 16.0
                )
                .unwrap();
            }
        }
    }
}

/// The points of a series split where a gap (an x with no value) falls
/// between two neighbours, so that no line is drawn across a missing cell.
fn segments<'a, 'p>(
    pts: &'a [(&'p Point, f64, f64)],
    gaps: &[f64],
) -> Vec<&'a [(&'p Point, f64, f64)]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..pts.len() {
        let (a, b) = (pts[i - 1].0.x, pts[i].0.x);
        let (lo, hi) = (a.min(b), a.max(b));
        if gaps.iter().any(|g| *g > lo && *g < hi) {
            out.push(&pts[start..i]);
            start = i;
        }
    }
    if start < pts.len() {
        out.push(&pts[start..]);
    }
    out
}

/// A point's shape: a circle, or the verdict's shape (triangle up for a
/// regression, down for an improvement, a cross when not comparable).
fn marker(v: Option<Verdict>, x: f64, y: f64, c: &str, hollow: bool) -> String {
    let fill = if hollow { "#fff" } else { c };
    match v {
        None | Some(Verdict::NoChange | Verdict::WithinGuestBias) => format!(
            r#"<circle cx="{x:.1}" cy="{y:.1}" r="3.5" fill="{fill}" stroke="{c}" stroke-width="1.5"/>"#
        ),
        Some(Verdict::Regression) => format!(
            r#"<path d="M{x:.1} {:.1}L{:.1} {:.1}H{:.1}Z" fill="{fill}" stroke="{c}"/>"#,
            y - 6.5,
            x + 6.0,
            y + 4.5,
            x - 6.0
        ),
        Some(Verdict::Improvement) => format!(
            r#"<path d="M{x:.1} {:.1}L{:.1} {:.1}H{:.1}Z" fill="{fill}" stroke="{c}"/>"#,
            y + 6.5,
            x + 6.0,
            y - 4.5,
            x - 6.0
        ),
        Some(Verdict::NotComparable) => format!(
            r#"<path d="M{:.1} {:.1}l9 9m0 -9l-9 9" stroke="{c}" stroke-width="2"/>"#,
            x - 4.5,
            y - 4.5
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(t: &Ticks) -> Vec<&str> {
        t.major.iter().map(|t| t.label.as_str()).collect()
    }

    #[test]
    fn size_axis_is_labelled_in_binary_units_from_4k_to_4g() {
        let t = ticks(
            Scale::Log2,
            Unit::Bytes,
            4096.0,
            4.0 * (1u64 << 30) as f64,
            None,
        );
        assert_eq!(
            labels(&t),
            ["4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M", "256M", "1G", "4G"]
        );
        assert_eq!((t.lo, t.hi), (4096.0, 4.0 * (1u64 << 30) as f64));
        assert_eq!(t.minor.len(), 10);
    }

    #[test]
    fn size_axis_rounds_out_to_labelled_octaves() {
        // The seed 001 sweep: 4 KiB .. 40000 KiB (not powers of two).
        let t = ticks(Scale::Log2, Unit::Bytes, 4096.0, 40000.0 * 1024.0, None);
        assert_eq!(
            labels(&t),
            ["4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"]
        );
        // A narrow range gets every octave.
        let t = ticks(Scale::Log2, Unit::Bytes, 4096.0, 65536.0, None);
        assert_eq!(labels(&t), ["4K", "8K", "16K", "32K", "64K"]);
        // One size: an octave either side.
        let t = ticks(Scale::Log2, Unit::Bytes, 409600.0, 409600.0, None);
        assert_eq!(labels(&t), ["256K", "512K"]);
        let t = ticks(Scale::Log2, Unit::Bytes, 524288.0, 524288.0, None);
        assert_eq!(labels(&t), ["256K", "512K", "1M"]);
    }

    #[test]
    fn time_axis_uses_decades_with_units() {
        let t = ticks(Scale::Log10, Unit::Nanoseconds, 1713.0, 169_677_478.0, None);
        assert_eq!(
            labels(&t),
            ["1 µs", "10 µs", "100 µs", "1 ms", "10 ms", "100 ms", "1 s"]
        );
        assert_eq!((t.lo, t.hi), (1e3, 1e9));
        assert_eq!(t.minor.len(), 6 * 8);
        // Two decades or less: 1-2-5 ticks, domain snapped to them.
        let t = ticks(Scale::Log10, Unit::Nanoseconds, 30.0, 900.0, None);
        assert_eq!(
            labels(&t),
            ["20 ns", "50 ns", "100 ns", "200 ns", "500 ns", "1 µs"]
        );
        assert_eq!((t.lo, t.hi), (20.0, 1000.0));
        // Many decades: every other decade labelled.
        let t = ticks(Scale::Log10, Unit::Nanoseconds, 0.5, 5e12, None);
        assert_eq!(t.major.len(), 9);
        assert_eq!(t.major[0].label, "0.01 ns");
        assert_eq!(t.major[8].label, "100000 s");
    }

    #[test]
    fn ratio_axis_includes_the_reference_and_picks_round_steps() {
        let t = ticks(Scale::Linear, Unit::Ratio, 1.8, 2.6, Some(1.0));
        assert_eq!(labels(&t), ["0.5", "1.0", "1.5", "2.0", "2.5", "3.0"]);
        let t = ticks(Scale::Linear, Unit::Ratio, 0.9, 1.3, Some(1.0));
        assert_eq!(
            labels(&t),
            ["0.8", "0.9", "1.0", "1.1", "1.2", "1.3", "1.4"]
        );
        assert!(t.lo <= 0.9 && t.hi >= 1.3);
        let t = ticks(Scale::Linear, Unit::Ratio, 0.99, 1.01, Some(1.0));
        assert_eq!(
            labels(&t),
            ["0.985", "0.990", "0.995", "1.000", "1.005", "1.010", "1.015"]
        );
        let t = ticks(Scale::Linear, Unit::Ratio, 1.0, 1.0, Some(1.0));
        assert!(t.lo < 1.0 && t.hi > 1.0 && t.major.len() >= 3);
    }

    #[test]
    fn fractions_map_the_domain_to_unit_interval() {
        let t = ticks(Scale::Log2, Unit::Bytes, 4096.0, 65536.0, None);
        assert_eq!(t.fraction(4096.0), Some(0.0));
        assert_eq!(t.fraction(65536.0), Some(1.0));
        assert!((t.fraction(16384.0).unwrap() - 0.5).abs() < 1e-12);
        assert_eq!(t.fraction(0.0), None);
        let t = ticks(Scale::Linear, Unit::Ratio, 0.0, 2.0, None);
        assert!((t.fraction(1.0).unwrap() - 0.5).abs() < 1e-12);
    }

    #[test]
    fn labels_and_escapes() {
        assert_eq!(format::bytes(512.0), "512B");
        assert_eq!(format::bytes(1.5 * 1048576.0), "1.5M");
        assert_eq!(format::nanos(2500.0), "2.5 µs");
        assert_eq!(format::nanos(169_677_478.0), "170 ms");
        assert_eq!(escape("a<b & \"c\""), "a&lt;b &amp; &quot;c&quot;");
    }

    #[test]
    fn svg_has_axes_legend_and_no_script() {
        use crate::view::{Axis, Series};
        let plot = Plot {
            id: "p".into(),
            title: "t <1>".into(),
            x: Axis {
                label: "region size".into(),
                scale: Scale::Log2,
                unit: Unit::Bytes,
            },
            y: Axis {
                label: "ratio".into(),
                scale: Scale::Linear,
                unit: Unit::Ratio,
            },
            series: vec![Series {
                label: "4K".into(),
                color: 0,
                dashed: false,
                points: vec![
                    Point {
                        x: 4096.0,
                        y: 1.0,
                        lo: Some(0.98),
                        hi: Some(1.02),
                        marker: Some(Verdict::NoChange),
                    },
                    Point {
                        x: 409600.0,
                        y: 1.7,
                        lo: Some(1.6),
                        hi: Some(1.8),
                        marker: Some(Verdict::Regression),
                    },
                ],
                gaps: vec![],
            }],
            reference: Some(1.0),
        };
        let svg = SvgPlotter::default().plot(&plot);
        assert!(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(svg.contains("t &lt;1&gt;"));
        assert!(svg.contains(">4K</text>") && svg.contains(">512K</text>"));
        assert!(svg.contains("regression (slower)"));
        assert!(svg.contains("4K, 400K: 1.700 (95% CI 1.600 to 1.800), REGRESSION"));
        assert!(!svg.contains("<script"));
    }
}
