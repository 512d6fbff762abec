//! SVG charts drawn with plotters: bars of req/s per variant, lines of
//! memory against idle connections, lines of latency percentiles.

use plotters::coord::ranged1d::SegmentValue;
use plotters::prelude::*;

fn color(i: usize) -> RGBColor {
    let c = Palette99::pick(i).to_rgba();
    RGBColor(c.0, c.1, c.2)
}

fn err<E: std::fmt::Debug>(e: E) -> String {
    format!("drawing a chart: {e:?}")
}

/// A bar per label.
pub fn bars(title: &str, y_desc: &str, bars: &[(String, f64)]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let width = (140 + 95 * bars.len() as u32).max(480);
        let root = SVGBackend::with_string(&mut svg, (width, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let top = bars.iter().map(|b| b.1).fold(0.0, f64::max).max(1.0) * 1.1;
        let n = bars.len().max(1);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(80)
            .build_cartesian_2d((0..n).into_segmented(), 0.0..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|v| match v {
                SegmentValue::CenterOf(i) => bars.get(*i).map(|b| b.0.clone()).unwrap_or_default(),
                _ => String::new(),
            })
            .y_desc(y_desc)
            .draw()
            .map_err(err)?;
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                let mut bar = Rectangle::new(
                    [
                        (SegmentValue::Exact(i), 0.0),
                        (SegmentValue::Exact(i + 1), *v),
                    ],
                    color(i).filled(),
                );
                bar.set_margin(0, 0, 8, 8);
                bar
            }))
            .map_err(err)?;
        // The figure on each bar: charts get read for their numbers.
        chart
            .draw_series(bars.iter().enumerate().map(|(i, (_, v))| {
                Text::new(
                    format!("{v:.0}"),
                    (SegmentValue::CenterOf(i), *v + top * 0.02),
                    ("sans-serif", 12).into_font().color(&BLACK),
                )
            }))
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A line per series of `(x, y)` points; `x_labels` names the x values when given.
pub fn lines(
    title: &str,
    (x_desc, y_desc): (&str, &str),
    series: &[(String, Vec<(f64, f64)>)],
    x_labels: Option<&[&str]>,
) -> Result<String, String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let points = series.iter().flat_map(|s| s.1.iter());
        let (mut x0, mut x1, mut y1) = (f64::MAX, f64::MIN, 0.0f64);
        for &(x, y) in points {
            x0 = x0.min(x);
            x1 = x1.max(x);
            y1 = y1.max(y);
        }
        if x0 > x1 {
            (x0, x1) = (0.0, 1.0);
        }
        let pad = ((x1 - x0) * 0.05).max(0.5);
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d((x0 - pad)..(x1 + pad), 0.0..(y1.max(1e-3) * 1.15))
            .map_err(err)?;
        let label_x = |x: &f64| match x_labels {
            Some(names) if (x.round() - x).abs() < 1e-9 && *x >= 0.0 => names
                .get(x.round() as usize)
                .map(|s| s.to_string())
                .unwrap_or_default(),
            Some(_) => String::new(),
            None => format!("{x:.0}"),
        };
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .x_label_formatter(&label_x)
            .draw()
            .map_err(err)?;
        for (i, (name, pts)) in series.iter().enumerate() {
            let c = color(i);
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), c.stroke_width(2)))
                .map_err(err)?
                .label(name.as_str())
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                });
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(svg)
}
