//! SVG charts drawn with plotters: bars of req/s per variant, lines of
//! memory against idle connections, lines of latency percentiles.
//!
//! Made to be read: the legend sits beside the plot, never over it; each
//! series has its own colour, marker and dash, so that two series with the
//! same values both show (one marker inside the other); the min–max of the
//! runs is drawn as a whisker on each point and bar; the value axis is
//! logarithmic when the values span a decade or more; and a variant whose
//! answers were invalid is drawn as such, with its count, instead of a figure.

use plotters::coord::ranged1d::SegmentValue;
use plotters::coord::Shift;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One bar: a variant's median with the least and the most of its runs,
/// or why it has no figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    /// The variant.
    pub label: String,
    /// (median, min, max), if valid.
    pub value: Option<(f64, f64, f64)>,
    /// Why it is not shown (`invalid: 43987 unexpected`).
    pub note: Option<String>,
}

/// One point of a line: x, the median, and the runs' min and max.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Where on the x axis.
    pub x: f64,
    /// The median.
    pub y: f64,
    /// The least of the runs.
    pub lo: f64,
    /// The most of the runs.
    pub hi: f64,
}

/// One line: a variant's points, or why it has none.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The variant.
    pub name: String,
    /// Its points, in x order.
    pub points: Vec<Point>,
    /// Shown in the legend after the name (`invalid: 12 unexpected`).
    pub note: Option<String>,
}

/// Ten colours that stay apart (Tableau 10).
const COLOURS: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

/// Markers, told apart by shape and by fill: a hollow circle around a
/// filled triangle still shows both.
const MARKERS: usize = 6;

/// Dash patterns (dash, gap) in pixels; (0, 0) is solid.
const DASHES: [(i32, i32); 3] = [(0, 0), (9, 5), (2, 4)];

/// Series `i`'s marker and dash: no two of the first 18 share both.
fn style_of(i: usize) -> (usize, (i32, i32)) {
    (i % MARKERS, DASHES[(i + i / MARKERS) % DASHES.len()])
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

/// Draw a marker of kind `kind` centred on pixel `at` of `area`.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    at: (i32, i32),
    kind: usize,
    c: RGBColor,
) -> Result<(), String> {
    let stroke = c.stroke_width(2);
    let e = EmptyElement::at(at);
    match kind {
        0 => area.draw(&(e + Circle::new((0, 0), 6, stroke))),
        1 => area.draw(&(e + Polygon::new(vec![(0, -5), (5, 4), (-5, 4)], c.filled()))),
        2 => area.draw(&(e + Rectangle::new([(-5, -5), (5, 5)], stroke))),
        3 => area.draw(&(e + Polygon::new(vec![(0, -6), (5, 0), (0, 6), (-5, 0)], c.filled()))),
        4 => area.draw(
            &(e + PathElement::new(vec![(-5, -5), (5, 5)], stroke)
                + PathElement::new(vec![(-5, 5), (5, -5)], stroke)),
        ),
        _ => area.draw(&(e + Circle::new((0, 0), 3, c.filled()))),
    }
    .map_err(err)
}

/// Should values from `lo` to `hi` be drawn on a log axis?
fn spans_decades(lo: f64, hi: f64) -> bool {
    lo > 0.0 && hi / lo >= 10.0
}

/// The power of ten at or below `v`: a log axis from there labels every
/// step (plotters' log axis labels only from its first power of ten up).
fn decade_below(v: f64) -> f64 {
    10f64.powf(v.log10().floor())
}

/// Axis labels with as many digits as they need.
fn tick(v: &f64) -> String {
    let a = v.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{v:.0}")
    } else if a >= 1.0 {
        format!("{v:.1}")
    } else if a >= 0.01 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// A bar per variant, with its runs' min–max as a whisker.
pub fn bars(title: &str, y_desc: &str, bars: &[Bar]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let width = (160 + 110 * bars.len() as u32).max(520);
        let root = SVGBackend::with_string(&mut svg, (width, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let values: Vec<(f64, f64, f64)> = bars.iter().filter_map(|b| b.value).collect();
        let hi = values.iter().map(|v| v.2).fold(0.0, f64::max).max(1.0);
        let lo = values.iter().map(|v| v.1).fold(f64::MAX, f64::min);
        let n = bars.len().max(1);
        let above = ("sans-serif", 12)
            .into_font()
            .color(&BLACK)
            .pos(Pos::new(HPos::Center, VPos::Bottom));
        let note_style = ("sans-serif", 11)
            .into_font()
            .color(&RED)
            .pos(Pos::new(HPos::Center, VPos::Center));
        macro_rules! draw {
            ($y:expr, $floor:expr, $mid:expr) => {{
                let floor: f64 = $floor;
                let mut chart = ChartBuilder::on(&root)
                    .caption(title, ("sans-serif", 18))
                    .margin(14)
                    .x_label_area_size(44)
                    .y_label_area_size(80)
                    .build_cartesian_2d((0..n - 1).into_segmented(), $y)
                    .map_err(err)?;
                chart
                    .configure_mesh()
                    .disable_x_mesh()
                    .x_labels(n)
                    .x_label_formatter(&|v| match v {
                        SegmentValue::CenterOf(i) => {
                            bars.get(*i).map(|b| b.label.clone()).unwrap_or_default()
                        }
                        _ => String::new(),
                    })
                    .y_label_formatter(&tick)
                    .y_desc(y_desc)
                    .draw()
                    .map_err(err)?;
                for (i, b) in bars.iter().enumerate() {
                    match b.value {
                        Some((median, min, max)) => {
                            let mut bar = Rectangle::new(
                                [
                                    (SegmentValue::Exact(i), floor),
                                    (SegmentValue::Exact(i + 1), median),
                                ],
                                colour(i).filled(),
                            );
                            bar.set_margin(0, 0, 10, 10);
                            chart.draw_series(std::iter::once(bar)).map_err(err)?;
                            let whisker = PathElement::new(
                                vec![
                                    (SegmentValue::CenterOf(i), min),
                                    (SegmentValue::CenterOf(i), max),
                                ],
                                BLACK.stroke_width(2),
                            );
                            chart.draw_series(std::iter::once(whisker)).map_err(err)?;
                            chart
                                .draw_series(std::iter::once(Text::new(
                                    format!("{median:.0}"),
                                    (SegmentValue::CenterOf(i), max),
                                    above.clone(),
                                )))
                                .map_err(err)?;
                        }
                        None => {
                            // No figure: the reason, where the bar would be.
                            chart
                                .draw_series(std::iter::once(Text::new(
                                    b.note.clone().unwrap_or_else(|| "n/a".into()),
                                    (SegmentValue::CenterOf(i), $mid),
                                    note_style.clone(),
                                )))
                                .map_err(err)?;
                        }
                    }
                }
            }};
        }
        if values.is_empty() || !spans_decades(lo, hi) {
            draw!(0.0..hi * 1.15, 0.0, hi * 0.5);
        } else {
            let floor = decade_below(lo);
            draw!((floor..hi * 1.6).log_scale(), floor, (lo * hi).sqrt());
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A line per series; `x_labels` names the x values (0, 1, ...) when given.
pub fn lines(
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[Series],
    x_labels: Option<&[&str]>,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        // Wide enough for the longest name (about 7 pixels a character).
        let longest = series
            .iter()
            .map(|s| s.name.chars().count() + s.note.as_ref().map_or(0, |n| n.chars().count() + 3))
            .max()
            .unwrap_or(0);
        let legend_width = (70 + 7 * longest as u32).clamp(240, 640);
        let root = SVGBackend::with_string(&mut svg, (660 + legend_width, 460)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        // The title over the whole width (a long one would not fit over the plot).
        let titled = root.titled(title, ("sans-serif", 18)).map_err(err)?;
        let (plot, legend) = titled.split_horizontally(660);
        let points = series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, 0.0f64);
        for p in points {
            x0 = x0.min(p.x);
            x1 = x1.max(p.x);
            y0 = y0.min(p.lo.min(p.y));
            y1 = y1.max(p.hi.max(p.y));
        }
        if x0 > x1 {
            let last = x_labels.map_or(1.0, |l| l.len().saturating_sub(1).max(1) as f64);
            (x0, x1, y0, y1) = (0.0, last, 0.0, 1.0);
        }
        let pad = ((x1 - x0) * 0.06).max(0.5);
        let label_x = |x: &f64| match x_labels {
            Some(names) if (x.round() - x).abs() < 1e-9 && *x >= 0.0 => names
                .get(x.round() as usize)
                .map(|s| s.to_string())
                .unwrap_or_default(),
            Some(_) => String::new(),
            None => format!("{x:.0}"),
        };
        macro_rules! draw {
            ($y:expr) => {{
                let mut chart = ChartBuilder::on(&plot)
                    .margin(14)
                    .x_label_area_size(44)
                    .y_label_area_size(70)
                    .build_cartesian_2d((x0 - pad)..(x1 + pad), $y)
                    .map_err(err)?;
                chart
                    .configure_mesh()
                    .x_desc(x_desc)
                    .y_desc(y_desc)
                    .x_label_formatter(&label_x)
                    .y_labels(12)
                    .y_label_formatter(&tick)
                    .draw()
                    .map_err(err)?;
                for (i, s) in series.iter().enumerate() {
                    let c = colour(i);
                    let (kind, (dash, gap)) = style_of(i);
                    let pts: Vec<(f64, f64)> = s.points.iter().map(|p| (p.x, p.y)).collect();
                    if dash == 0 {
                        chart
                            .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                            .map_err(err)?;
                    } else {
                        chart
                            .draw_series(std::iter::once(DashedPathElement::new(
                                pts.clone(),
                                dash,
                                gap,
                                c.stroke_width(2),
                            )))
                            .map_err(err)?;
                    }
                    chart
                        .draw_series(s.points.iter().filter(|p| p.hi > p.lo).map(|p| {
                            PathElement::new(vec![(p.x, p.lo), (p.x, p.hi)], c.stroke_width(1))
                        }))
                        .map_err(err)?;
                    for p in &pts {
                        // In pixels, on the whole picture: the plot starts at its left edge.
                        draw_marker(&root, chart.backend_coord(p), kind, c)?;
                    }
                }
            }};
        }
        if spans_decades(y0, y1) {
            draw!((decade_below(y0)..y1 * 1.5).log_scale());
        } else {
            draw!(0.0..(y1.max(1e-3) * 1.15));
        }
        // The legend, beside the plot: a sample of each line with its
        // marker, and the name (with its note).
        for (i, s) in series.iter().enumerate() {
            let c = colour(i);
            let (kind, (dash, gap)) = style_of(i);
            let y = 50 + 22 * i as i32;
            if dash == 0 {
                legend
                    .draw(&PathElement::new(vec![(8, y), (48, y)], c.stroke_width(2)))
                    .map_err(err)?;
            } else {
                legend
                    .draw(&DashedPathElement::new(
                        vec![(8, y), (48, y)],
                        dash,
                        gap,
                        c.stroke_width(2),
                    ))
                    .map_err(err)?;
            }
            draw_marker(&legend, (28, y), kind, c)?;
            let name = match &s.note {
                Some(n) => format!("{} ({n})", s.name),
                None => s.name.clone(),
            };
            let colour_of_text = if s.note.is_some() { RED } else { BLACK };
            legend
                .draw(&Text::new(
                    name,
                    (56, y - 7),
                    ("sans-serif", 13).into_font().color(&colour_of_text),
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(name: &str, ys: &[f64]) -> Series {
        Series {
            name: name.into(),
            points: ys
                .iter()
                .enumerate()
                .map(|(i, &y)| Point {
                    x: 100.0 * (i + 1) as f64,
                    y,
                    lo: y,
                    hi: y,
                })
                .collect(),
            note: None,
        }
    }

    #[test]
    fn two_identical_series_both_show_their_markers_and_names() {
        let svg = lines(
            "t",
            ("x", "y"),
            &[
                series("prefork/system", &[64.3, 64.3]),
                series("prefork/locked", &[64.3, 64.3]),
            ],
            None,
        )
        .expect("drawn");
        assert!(svg.contains("prefork/system") && svg.contains("prefork/locked"));
        // The first series' hollow circles (two points and the legend's),
        // the second's filled triangles (the same): one does not hide the other.
        assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
        assert_eq!(svg.matches("<polygon").count(), 3, "{svg}");
    }

    #[test]
    fn the_legend_is_outside_the_plot() {
        let svg = lines("t", ("x", "y"), &[series("a", &[1.0, 2.0])], None).expect("drawn");
        // The legend's text starts right of the 660-pixel plot area.
        let at = svg.find(">\na\n</text>").expect("the name");
        let tag = &svg[svg[..at].rfind("<text").expect("a text element")..at];
        let x: f64 = tag
            .split("x=\"")
            .nth(1)
            .and_then(|r| r.split('"').next())
            .and_then(|v| v.parse().ok())
            .expect("an x");
        assert!(x > 660.0, "{tag}");
    }

    #[test]
    fn values_that_span_decades_get_a_log_axis() {
        let svg = lines(
            "t",
            ("x", "y"),
            &[
                series("event", &[2.0, 2.1]),
                series("prefork", &[64.0, 120.0]),
            ],
            None,
        )
        .expect("drawn");
        // Log ticks: 1, 2, 5 steps (a linear axis from 0 would show 0).
        assert!(!svg.contains(">\n0\n</text>"), "{svg}");
        assert!(spans_decades(2.0, 120.0) && !spans_decades(60.0, 120.0));
    }

    #[test]
    fn every_series_differs_from_the_others_in_marker_or_dash() {
        let styles: Vec<_> = (0..18).map(style_of).collect();
        for (i, a) in styles.iter().enumerate() {
            for b in &styles[i + 1..] {
                assert_ne!(a, b);
            }
        }
    }

    #[test]
    fn invalid_bars_show_their_reason_instead_of_a_figure() {
        let svg = bars(
            "req/s",
            "requests per second",
            &[
                Bar {
                    label: "event/system".into(),
                    value: Some((1000.0, 900.0, 1100.0)),
                    note: None,
                },
                Bar {
                    label: "worker/system".into(),
                    value: None,
                    note: Some("invalid: 40 unexpected".into()),
                },
            ],
        )
        .expect("drawn");
        assert!(svg.contains("\ninvalid: 40 unexpected\n"), "{svg}");
        assert!(svg.contains("\n1000\n"), "{svg}");
    }
}
