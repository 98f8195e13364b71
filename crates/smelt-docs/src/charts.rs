//! The small charts of a flow's history: one value per run, oldest to newest, as an inline
//! SVG line with a point (and a tooltip) per run — a handful of shapes, no library.

use std::fmt::Write;

use crate::escape;

/// Width and height of a chart (px).
const W: f64 = 220.0;
const H: f64 = 60.0;
/// Room for the points at the edges.
const PAD: f64 = 6.0;

/// The chart of `metric` (its title `title`) over `points` (run label, value).
pub fn line(metric: &str, title: &str, points: &[(String, i64)]) -> String {
    let max = points.iter().map(|p| p.1).max().unwrap_or(0).max(1) as f64;
    let step = match points.len() {
        0 | 1 => 0.0,
        n => (W - 2.0 * PAD) / (n - 1) as f64,
    };
    let at = |i: usize, v: i64| {
        let x = if points.len() == 1 {
            W / 2.0
        } else {
            PAD + step * i as f64
        };
        (x, H - PAD - (v as f64 / max) * (H - 2.0 * PAD))
    };
    let mut line = String::new();
    let mut dots = String::new();
    for (i, (label, v)) in points.iter().enumerate() {
        let (x, y) = at(i, *v);
        let _ = write!(line, "{}{x:.1},{y:.1}", if i == 0 { "" } else { " " });
        let _ = write!(
            dots,
            "<circle class=\"point\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\"><title>{}: {v}</title></circle>",
            escape(label)
        );
    }
    let last = points.last().map_or(0, |p| p.1);
    format!(
        "<figure class=\"chart\" data-metric=\"{metric}\"><figcaption>{title} <b>{last}</b> <small>max {}</small></figcaption>\
         <svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\"><polyline points=\"{line}\" fill=\"none\" stroke=\"#3b6ea8\" stroke-width=\"1.5\"/>{dots}</svg></figure>",
        max as i64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_per_run_scaled_to_the_largest() {
        let points = vec![
            ("a".to_string(), 0),
            ("b".to_string(), 10),
            ("c".to_string(), 5),
        ];
        let svg = line("applied", "applied", &points);
        assert_eq!(svg.matches("class=\"point\"").count(), 3);
        assert!(
            svg.contains("points=\"6.0,54.0 110.0,6.0 214.0,30.0\""),
            "{svg}"
        );
        assert!(svg.contains("<b>5</b>"), "{svg}");
        let one = line("applied", "applied", &points[..1]);
        assert!(one.contains("cx=\"110.0\""), "{one}");
        assert_eq!(line("x", "x", &[]).matches("class=\"point\"").count(), 0);
    }
}
