//! PNG line charts for the benchmarks and simulators (plotters, bitmap backend).

use anyhow::{bail, Result};
use std::path::Path;

/// The font every chart uses (Debian package fonts-dejavu-core, installed by setup).
pub const FONT_PATH: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";

/// Registers [`FONT_PATH`] once as plotters' "sans-serif".
pub fn load_font() -> Result<()> {
    use std::sync::OnceLock;
    static LOADED: OnceLock<bool> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        std::fs::read(FONT_PATH)
            .ok()
            .map(|bytes| {
                let font: &'static [u8] = Box::leak(bytes.into_boxed_slice());
                plotters::style::register_font("sans-serif", plotters::style::FontStyle::Normal, font).is_ok()
            })
            .unwrap_or(false)
    });
    if *loaded {
        Ok(())
    } else {
        bail!("cannot load the plot font {FONT_PATH} (Debian: apt-get install fonts-dejavu-core)")
    }
}

/// Axis scales of a chart.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scales {
    /// Logarithmic x axis (all x must be > 0).
    pub log_x: bool,
    /// Logarithmic y axis (all y must be > 0).
    pub log_y: bool,
}

/// A named series of (x, y) points.
pub type Series = (String, Vec<(f64, f64)>);

/// Draws the series as lines with points, with a legend.
pub fn line_chart(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    scales: Scales,
) -> Result<()> {
    use plotters::prelude::*;
    load_font()?;
    let points = || series.iter().flat_map(|(_, v)| v.iter().copied());
    let fold = |f: fn(f64, f64) -> f64, init: f64, pick: fn((f64, f64)) -> f64| points().map(pick).fold(init, f);
    let (x_min, x_max) = (fold(f64::min, f64::INFINITY, |p| p.0), fold(f64::max, 0.0, |p| p.0));
    let (y_min, y_max) = (fold(f64::min, f64::INFINITY, |p| p.1), fold(f64::max, 0.0, |p| p.1));
    if !x_max.is_finite() || points().next().is_none() {
        bail!("nothing to plot for {title}");
    }
    let root = BitMapBackend::new(path, (1000, 650)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut builder = ChartBuilder::on(&root);
    builder.caption(title, ("sans-serif", 24)).margin(15).x_label_area_size(45).y_label_area_size(70);
    let x_lo = if scales.log_x { x_min.max(1e-12) } else { 0.0 };
    let y_lo = if scales.log_y { (y_min * 0.8).max(1e-12) } else { 0.0 };
    let (x_hi, y_hi) = (x_max * 1.05 + 1e-9, y_max * 1.15 + 1e-9);
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw()?;
            for (i, (name, v)) in series.iter().enumerate() {
                let color = Palette99::pick(i).to_rgba();
                chart
                    .draw_series(LineSeries::new(v.iter().copied(), color.stroke_width(2)))?
                    .label(name.clone())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2)));
                chart.draw_series(v.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
            }
            chart.configure_series_labels().background_style(WHITE.mix(0.8)).border_style(BLACK).draw()?;
        }};
    }
    match (scales.log_x, scales.log_y) {
        (false, false) => draw!(builder.build_cartesian_2d(x_lo..x_hi, y_lo..y_hi)?),
        (true, false) => draw!(builder.build_cartesian_2d((x_lo..x_hi).log_scale(), y_lo..y_hi)?),
        (false, true) => draw!(builder.build_cartesian_2d(x_lo..x_hi, (y_lo..y_hi).log_scale())?),
        (true, true) => draw!(builder.build_cartesian_2d((x_lo..x_hi).log_scale(), (y_lo..y_hi).log_scale())?),
    }
    root.present()?;
    Ok(())
}
