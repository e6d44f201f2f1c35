//! Charts of backoff-policy curves: retry delay against retry number.
//!
//! [`render_file`] writes an SVG or PNG through `plotters`; [`render_terminal`]
//! draws a plain-text chart. Delays are always given in milliseconds and shown
//! as human durations ("30s", "5m", "2h") because raw millisecond counts are
//! unreadable for the long delays that backoff policies reach.

use std::path::Path;
use std::sync::OnceLock;

use anyhow::{anyhow, bail};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// One curve: delay (milliseconds) for each retry number, with the band jitter allows around
/// it (lowest and highest delay per retry; empty for none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub label: String,
    pub points: Vec<(u32, u64)>,
    pub band: Vec<(u32, u64, u64)>,
    pub style: Style,
}

impl Series {
    /// A plain line, without a band.
    pub fn line(label: impl Into<String>, points: Vec<(u32, u64)>) -> Self {
        Self {
            label: label.into(),
            points,
            band: Vec::new(),
            style: Style::Line,
        }
    }
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Style {
    /// A solid line (with markers while they do not smear).
    #[default]
    Line,
    /// A dashed line: what is still to come.
    Dashed,
    /// Markers alone: what happened.
    Points,
}

/// Appearance of a chart written by [`render_file`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartOptions {
    pub title: String,
    pub width: u32,
    pub height: u32,
    pub log_scale: bool,
}

impl Default for ChartOptions {
    fn default() -> Self {
        Self {
            title: "Retry delay by retry number".to_owned(),
            width: 960,
            height: 600,
            log_scale: false,
        }
    }
}

/// Family name under which the embedded DejaVu Sans is registered; PNG output
/// must not depend on fonts installed on the machine.
const FONT: &str = "DejaVu Sans";
/// Bounds on image size: plotters cannot lay out a chart in a tiny area, and a
/// huge bitmap would exhaust memory instead of failing cleanly.
const SIZE_LIMITS: std::ops::RangeInclusive<u32> = 100..=8192;
/// Tableau 10 as 0xRRGGBB: distinct colours that stay readable on white.
const COLOURS: [u32; 10] = [
    0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b, 0xe377c2, 0x7f7f7f, 0xbcbd22,
    0x17becf,
];
/// Terminal markers, one per series, repeating after ten series.
const MARKERS: [char; 10] = ['*', '+', 'o', 'x', '#', '@', '%', '&', '=', '~'];

/// Writes an SVG or a PNG, chosen by the file extension (`.svg` / `.png`,
/// case-insensitive); any other extension is an error naming the supported ones.
pub fn render_file(series: &[Series], path: &Path, options: &ChartOptions) -> anyhow::Result<()> {
    let bounds =
        Bounds::of(series).ok_or_else(|| anyhow!("nothing to plot: no series has points"))?;
    let extension = path.extension().and_then(|e| e.to_str());
    let size @ (w, h) = (options.width, options.height);
    if !SIZE_LIMITS.contains(&w) || !SIZE_LIMITS.contains(&h) {
        bail!("chart size {w}x{h} is outside {SIZE_LIMITS:?} pixels per side");
    }
    register_font()?;
    let chart = Chart {
        series,
        bounds,
        options,
    };
    match extension.map(str::to_ascii_lowercase).as_deref() {
        Some("svg") => chart.draw(SVGBackend::new(path, size)),
        Some("png") => chart.draw(BitMapBackend::new(path, size)),
        _ => bail!("cannot write chart {}: use .svg or .png", path.display()),
    }
    // One flat message, so that plain `{}` formatting still shows the cause.
    .map_err(|e| anyhow!("cannot write chart {}: {e:#}", path.display()))
}

/// The chart as SVG text, for a page to show inline.
pub fn render_svg(series: &[Series], options: &ChartOptions) -> anyhow::Result<String> {
    let bounds =
        Bounds::of(series).ok_or_else(|| anyhow!("nothing to plot: no series has points"))?;
    let size @ (w, h) = (options.width, options.height);
    if !SIZE_LIMITS.contains(&w) || !SIZE_LIMITS.contains(&h) {
        bail!("chart size {w}x{h} is outside {SIZE_LIMITS:?} pixels per side");
    }
    register_font()?;
    let chart = Chart {
        series,
        bounds,
        options,
    };
    let mut text = String::new();
    chart.draw(SVGBackend::with_string(&mut text, size))?;
    Ok(text)
}

fn register_font() -> anyhow::Result<()> {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    let ok = *REGISTERED.get_or_init(|| {
        plotters::style::register_font(FONT, FontStyle::Normal, dejavu::sans::regular()).is_ok()
    });
    ok.then_some(())
        .ok_or_else(|| anyhow!("the embedded DejaVu Sans font failed to load"))
}

/// What [`render_file`] draws, independent of the output format.
struct Chart<'a> {
    series: &'a [Series],
    bounds: Bounds,
    options: &'a ChartOptions,
}

impl Chart<'_> {
    fn draw<DB: DrawingBackend>(&self, backend: DB) -> anyhow::Result<()> {
        // Plotters errors are generic over the backend; only their message is kept.
        let err = |e: DrawingAreaErrorKind<DB::ErrorType>| anyhow!("{e}");
        let root = backend.into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let b = &self.bounds;
        if self.options.log_scale {
            // Log axes cannot show 0: zero delays (phased policies) are clamped to
            // a floor well below the smallest real delay, and that tick reads "0".
            let lowest = b.min_positive.unwrap_or(1.0);
            let floor = lowest / if b.has_zero { 4.0 } else { 1.5 };
            let top = (b.y_max * 1.5).max(floor * 4.0);
            // Plotters puts log ticks at powers of ten ("16.67m"); round
            // durations read better.
            let (mut bold, light) = log_ticks(if b.has_zero { floor * 2.0 } else { floor }, top);
            if b.has_zero {
                bold.insert(0, floor);
            }
            let y_range = (floor..top)
                .log_scale()
                .with_key_points(bold)
                .with_light_points(light);
            let label = |v: f64| {
                if b.has_zero && v <= floor {
                    "0".to_owned()
                } else {
                    human_duration(v)
                }
            };
            self.plot(&root, y_range, label, |ms| (ms as f64).max(floor))
                .map_err(err)?;
        } else {
            // Scale to a display unit so linear ticks fall on round values of it.
            let unit = display_unit(b.y_max);
            let top = (b.y_max * 1.05 / unit).max(1.0);
            let label = |v: f64| human_duration(v * unit);
            self.plot(&root, 0.0..top, label, |ms| ms as f64 / unit)
                .map_err(err)?;
        }
        root.present().map_err(err)
    }

    /// Draws axes, curves and legend. `to_y` maps a delay to a y coordinate and
    /// `label` a y coordinate to its tick label.
    fn plot<DB, Y>(
        &self,
        root: &DrawingArea<DB, Shift>,
        y_range: Y,
        label: impl Fn(f64) -> String,
        to_y: impl Fn(u64) -> f64,
    ) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
    where
        DB: DrawingBackend,
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        // A single retry number still needs a non-empty x range.
        let (lo, hi) = (self.bounds.x_min, self.bounds.x_max);
        let start = lo.min(u32::MAX - 1);
        let x_range = if lo < hi { lo..hi } else { start..start + 1 };
        let mut builder = ChartBuilder::on(root);
        if !self.options.title.is_empty() {
            builder.caption(&self.options.title, (FONT, 22));
        }
        let mut chart = builder
            .margin(16)
            .x_label_area_size(44)
            .y_label_area_size(72)
            .build_cartesian_2d(x_range, y_range)?;
        chart
            .configure_mesh()
            .x_desc("retry")
            .y_desc("delay")
            .y_label_formatter(&|v| label(*v))
            .label_style((FONT, 14))
            .axis_desc_style((FONT, 16))
            .draw()?;
        // Rising curves leave the top left empty on a linear axis, but on a log
        // axis they climb early and the bottom right is the free corner.
        let legend_position = if self.options.log_scale {
            SeriesLabelPosition::LowerRight
        } else {
            SeriesLabelPosition::UpperLeft
        };
        // Markers only help while they do not merge into a smear.
        let marker_limit = usize::try_from(self.options.width / 6).unwrap_or(usize::MAX);
        // Bands first, so that every line stays on top of them.
        for (index, s) in self.series.iter().enumerate() {
            if s.band.is_empty() {
                continue;
            }
            let colour = colour_of(index);
            let upper = s.band.iter().map(|&(x, _, high)| (x, to_y(high)));
            let lower = s.band.iter().rev().map(|&(x, low, _)| (x, to_y(low)));
            let outline: Vec<(u32, f64)> = upper.chain(lower).collect();
            chart.draw_series(std::iter::once(Polygon::new(
                outline,
                colour.mix(0.18).filled(),
            )))?;
        }
        for (index, s) in self.series.iter().enumerate() {
            let colour = colour_of(index);
            let points = || s.points.iter().map(|&(x, ms)| (x, to_y(ms)));
            // Wide strokes get miter spikes where many points zigzag within a
            // pixel; hairlines do not.
            let stroke = if s.points.len() <= marker_limit { 2 } else { 1 };
            let drawn = match s.style {
                Style::Line => {
                    chart.draw_series(LineSeries::new(points(), colour.stroke_width(stroke)))?
                }
                Style::Dashed => chart.draw_series(DashedLineSeries::new(
                    points(),
                    6,
                    4,
                    colour.stroke_width(stroke),
                ))?,
                Style::Points => {
                    chart.draw_series(points().map(|p| Circle::new(p, 5, colour.filled())))?
                }
            };
            let style = s.style;
            drawn
                .label(&s.label)
                .legend(move |(x, y)| -> DynElement<'static, DB, (i32, i32)> {
                    match style {
                        Style::Points => Circle::new((x + 10, y), 5, colour.filled()).into_dyn(),
                        Style::Line | Style::Dashed => {
                            PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(3))
                                .into_dyn()
                        }
                    }
                });
            if s.style == Style::Line && s.points.len() <= marker_limit {
                chart.draw_series(points().map(|p| Circle::new(p, 3, colour.filled())))?;
            }
        }
        chart
            .configure_series_labels()
            .position(legend_position)
            .label_font((FONT, 14))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
    }
}

/// The colour of the series at `index`.
fn colour_of(index: usize) -> RGBColor {
    let [_, r, g, b] = COLOURS[index % COLOURS.len()].to_be_bytes();
    RGBColor(r, g, b)
}

/// A chart for the terminal as plain text: `width` x `height` character cells
/// plus axis labels and one legend line per series, each with its own marker.
/// Sizes are clamped to 10..=400 by 3..=200 cells.
pub fn render_terminal(series: &[Series], width: usize, height: usize) -> String {
    let Some(bounds) = Bounds::of(series) else {
        return "nothing to plot: no series has points\n".to_owned();
    };
    let (width, height) = (width.clamp(10, 400), height.clamp(3, 200));
    let y_max = bounds.y_max.max(1.0);
    let x_min = f64::from(bounds.x_min);
    let x_span = f64::from(bounds.x_max) - x_min;
    let mut grid = vec![vec![' '; width]; height];
    for (index, s) in series.iter().enumerate() {
        let marker = MARKERS[index % MARKERS.len()];
        // A series' first point joins itself.
        let mut previous = None;
        for &(x, ms) in &s.points {
            let col = cell((f64::from(x) - x_min) / x_span, width);
            let here = (col, ms as f64 / y_max);
            segment(&mut grid, previous.unwrap_or(here), here, marker);
            previous = Some(here);
        }
    }
    let row_label =
        |row: usize| human_duration(y_max * (height - 1 - row) as f64 / (height - 1) as f64);
    let labelled = [0, (height - 1) / 2, height - 1];
    let margin = labelled
        .map(|r| row_label(r).len())
        .into_iter()
        .max()
        .unwrap_or(0);
    let mut out = format!("{:>margin$}\n", "delay");
    for (row, cells) in grid.iter().enumerate() {
        let (label, tick) = if labelled.contains(&row) {
            (row_label(row), '┤')
        } else {
            (String::new(), '│')
        };
        let line: String = cells.iter().collect();
        out.push_str(&format!("{label:>margin$} {tick}{}\n", line.trim_end()));
    }
    out.push_str(&format!("{:margin$} └{}\n", "", "─".repeat(width)));
    let mut axis = vec![' '; width];
    put(&mut axis, 0, &bounds.x_min.to_string());
    put(&mut axis, width.saturating_sub(5) / 2, "retry");
    let x_max = bounds.x_max.to_string();
    put(&mut axis, width.saturating_sub(x_max.len()), &x_max);
    let axis: String = axis.iter().collect();
    out.push_str(&format!("{:margin$}  {}\n", "", axis.trim_end()));
    for (s, marker) in series.iter().zip(MARKERS.iter().cycle()) {
        out.push_str(&format!("  {marker} {}\n", s.label));
    }
    out
}

/// Joins two (column, level) points, level 0 being the bottom row and 1 the
/// top, filling vertical runs so that steep jumps stay connected.
fn segment(grid: &mut [Vec<char>], from: (usize, f64), to: (usize, f64), marker: char) {
    let ((c0, l0), (c1, l1)) = if from.0 <= to.0 {
        (from, to)
    } else {
        (to, from)
    };
    let height = grid.len();
    let row_of = |level: f64| height - 1 - cell(level, height);
    let mut previous = row_of(l0);
    for c in c0..=c1 {
        let t = if c1 > c0 {
            (c - c0) as f64 / (c1 - c0) as f64
        } else {
            1.0
        };
        let row = row_of(l0 + (l1 - l0) * t);
        for line in &mut grid[previous.min(row)..=previous.max(row)] {
            line[c] = marker;
        }
        previous = row;
    }
}

/// Writes `text` into `line` from `start`, dropping what does not fit.
fn put(line: &mut [char], start: usize, text: &str) {
    for (slot, c) in line.iter_mut().skip(start).zip(text.chars()) {
        *slot = c;
    }
}

/// Index of the cell containing `fraction` of the way along `cells` cells.
// Safe cast: the value is clamped to 0..=cells-1 first (NaN becomes 0).
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn cell(fraction: f64, cells: usize) -> usize {
    let last = cells.saturating_sub(1) as f64;
    let f = if fraction.is_nan() { 0.0 } else { fraction };
    (f * last).round().clamp(0.0, last) as usize
}

/// Data extent across all series.
#[derive(Debug)]
struct Bounds {
    x_min: u32,
    x_max: u32,
    y_max: f64,
    min_positive: Option<f64>,
    has_zero: bool,
}

impl Bounds {
    /// `None` when there is no point at all to plot.
    fn of(series: &[Series]) -> Option<Self> {
        // A band's edges count as points: the chart must hold them too.
        let mut points = series.iter().flat_map(|s| {
            let band = s
                .band
                .iter()
                .flat_map(|&(x, low, high)| [(x, low), (x, high)]);
            s.points.iter().copied().chain(band)
        });
        let (x, ms) = points.next()?;
        let mut b = Self {
            x_min: x,
            x_max: x,
            y_max: ms as f64,
            min_positive: None,
            has_zero: false,
        };
        for (x, ms) in std::iter::once((x, ms)).chain(points) {
            b.x_min = b.x_min.min(x);
            b.x_max = b.x_max.max(x);
            b.y_max = b.y_max.max(ms as f64);
            b.has_zero |= ms == 0;
            if ms > 0 {
                b.min_positive = Some(b.min_positive.map_or(ms as f64, |m| m.min(ms as f64)));
            }
        }
        Some(b)
    }
}

// Milliseconds per second, minute, hour and day.
const S: f64 = 1_000.0;
const M: f64 = 60.0 * S;
const H: f64 = 60.0 * M;
const D: f64 = 24.0 * H;
const UNITS: [(f64, &str); 5] = [(D, "d"), (H, "h"), (M, "m"), (S, "s"), (1.0, "ms")];
/// Round durations for log-axis ticks: about 1-2-5 steps, and about decades.
#[rustfmt::skip]
const FINE: [f64; 31] = [
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, S, 2.0 * S, 5.0 * S, 10.0 * S, 30.0 * S,
    M, 2.0 * M, 5.0 * M, 10.0 * M, 30.0 * M, H, 2.0 * H, 6.0 * H, 12.0 * H,
    D, 2.0 * D, 7.0 * D, 14.0 * D, 30.0 * D, 90.0 * D, 180.0 * D, 365.0 * D,
];
#[rustfmt::skip]
const COARSE: [f64; 13] =
    [1.0, 10.0, 100.0, S, 10.0 * S, M, 10.0 * M, H, 6.0 * H, D, 7.0 * D, 30.0 * D, 365.0 * D];

/// Bold and light tick values within `lo..=hi` for a log axis of durations:
/// the fine ladder while it gives at most 12 labels, else the coarse one thinned.
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    // Beyond a year (up to u64::MAX ms) only decades of days matter.
    let tail = (3..=12).map(|e| 10f64.powi(e) * D);
    let pick = |ladder: &[f64]| -> Vec<f64> {
        let all = ladder.iter().copied().chain(tail.clone());
        all.filter(|v| (lo..=hi).contains(v)).collect()
    };
    let fine = pick(&FINE);
    if fine.len() <= 12 {
        return (fine.clone(), fine);
    }
    let coarse = pick(&COARSE);
    let step = coarse.len().div_ceil(12).max(1);
    (coarse.into_iter().step_by(step).collect(), fine)
}

/// Milliseconds per display unit for a linear axis reaching `max_ms`: the
/// largest unit the maximum spans at least three times, so ticks are not all
/// fractions of it.
fn display_unit(max_ms: f64) -> f64 {
    UNITS
        .iter()
        .map(|&(ms, _)| ms)
        .find(|&ms| max_ms >= 3.0 * ms)
        .unwrap_or(1.0)
}

/// "0", "250ms", "1.5s", "30s", "5m", "2h", "3d": the largest unit the value
/// reaches, with at most two decimals.
fn human_duration(ms: f64) -> String {
    if ms.is_nan() || ms <= 0.0 {
        return "0".to_owned();
    }
    let (size, suffix) = UNITS
        .iter()
        .copied()
        .find(|&(size, _)| ms >= size)
        .unwrap_or((1.0, "ms"));
    let number = format!("{:.2}", ms / size);
    format!(
        "{}{suffix}",
        number.trim_end_matches('0').trim_end_matches('.')
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(label: &str, points: impl IntoIterator<Item = (u32, u64)>) -> Series {
        Series::line(label, points.into_iter().collect())
    }

    #[test]
    fn svg_text_has_bands_dashes_and_points() {
        let mut had = series("had", [(1, 1_000), (2, 2_500)]);
        had.style = Style::Points;
        let mut to_come = series("to come", [(3, 4_000), (4, 8_000)]);
        to_come.style = Style::Dashed;
        to_come.band = vec![(3, 3_000, 5_000), (4, 6_000, 10_000)];
        let svg = render_svg(&[had, to_come], &ChartOptions::default()).unwrap();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains("had") && svg.contains("to come"));
        assert!(svg.contains("<polygon"), "the band is drawn");
        assert!(svg.contains("<circle"), "the points are drawn");
        assert!(render_svg(&[], &ChartOptions::default()).is_err());
    }

    fn sample() -> Vec<Series> {
        vec![
            series("exponential 500ms x2", (0..12).map(|n| (n, 500 << n))),
            series(
                "phased 3x0 then 1m",
                (0..12).map(|n| (n, if n < 3 { 0 } else { 60_000 })),
            ),
        ]
    }

    fn temp_path(name: &str) -> std::path::PathBuf {
        std::env::temp_dir().join(format!("tenax-chart-{}-{name}", std::process::id()))
    }

    #[test]
    fn writes_svg_and_png_with_legend() {
        for log_scale in [false, true] {
            let options = ChartOptions {
                log_scale,
                ..ChartOptions::default()
            };
            let svg = temp_path(&format!("{log_scale}.SVG"));
            render_file(&sample(), &svg, &options).unwrap();
            let text = std::fs::read_to_string(&svg).unwrap();
            for s in sample() {
                assert!(text.contains(&s.label), "SVG lacks legend {:?}", s.label);
            }
            assert!(text.contains("retry") && text.contains("delay"));
            // Log ticks are round durations, not plotters' powers of ten.
            assert!(
                text.contains(if log_scale { "500ms" } else { "16m" }),
                "{text}"
            );
            let png = temp_path(&format!("{log_scale}.png"));
            render_file(&sample(), &png, &options).unwrap();
            let bytes = std::fs::read(&png).unwrap();
            assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
            for path in [svg, png] {
                std::fs::remove_file(path).unwrap();
            }
        }
    }

    #[test]
    fn rejects_empty_input_and_unknown_extension() {
        let options = ChartOptions::default();
        let empty = [series("none", [])];
        for input in [&[][..], &empty[..]] {
            let e = render_file(input, &temp_path("empty.svg"), &options).unwrap_err();
            assert!(e.to_string().contains("nothing to plot"), "{e}");
            assert!(render_terminal(input, 40, 10).contains("nothing to plot"));
        }
        let e = render_file(&sample(), &temp_path("chart.jpg"), &options).unwrap_err();
        assert!(e.to_string().contains(".svg or .png"), "{e}");
        assert!(!temp_path("chart.jpg").exists());
    }

    #[test]
    fn terminal_chart_has_labels_legend_and_size() {
        let text = render_terminal(&sample(), 40, 8);
        assert!(text.contains("retry") && text.contains("delay") && text.contains("17.07m"));
        assert!(text.contains("  * exponential 500ms x2") && text.contains("  + phased 3x0"));
        // Header, 8 grid rows, axis, x labels, 2 legend lines.
        assert_eq!(text.lines().count(), 13, "{text}");
    }

    #[test]
    fn extreme_inputs_do_not_panic() {
        let cases = [
            series(
                "huge",
                (0..100_000).map(|n| (n, 3_200_000_000_000 - u64::from(n))),
            ),
            series("one", [(u32::MAX, u64::MAX)]),
            series("flat", [(1, 0), (2, 0), (3, 0)]),
        ];
        for case in cases {
            let input = [case];
            for log_scale in [false, true] {
                let options = ChartOptions {
                    log_scale,
                    width: 300,
                    height: 200,
                    ..Default::default()
                };
                let path = temp_path(&format!("extreme-{log_scale}.png"));
                render_file(&input, &path, &options).unwrap();
                std::fs::remove_file(path).unwrap();
            }
            for (w, h) in [(0, 0), (80, 20), (usize::MAX, usize::MAX)] {
                assert!(render_terminal(&input, w, h).contains(&input[0].label));
            }
        }
    }

    #[test]
    fn durations_are_human() {
        let ms = [
            0.0,
            250.0,
            1_500.0,
            30_000.0,
            300_000.0,
            7_200_000.0,
            2.0 * D,
        ];
        assert_eq!(
            ms.map(human_duration),
            ["0", "250ms", "1.5s", "30s", "5m", "2h", "2d"]
        );
        assert_eq!(display_unit(90_000.0), S);
        assert_eq!(display_unit(600_000.0), M);
        let (bold, _) = log_ticks(1.0, 3.2e12);
        assert!(bold.len() <= 12 && bold.iter().all(|v| (1.0..=3.2e12).contains(v)));
    }
}
