//! Grouped bar charts as standalone SVG: one group per backend, one bar per series, the value
//! written above each bar. No dependency: the charts are a few dozen elements.

use std::fmt::Write as _;

/// One chart: `groups` along the x axis, each with one bar per series (`None`: not measured).
pub(crate) struct Chart<'a> {
    pub title: &'a str,
    pub unit: &'a str,
    pub series: Vec<&'a str>,
    pub groups: Vec<(&'a str, Vec<Option<f64>>)>,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 60.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 80.0;
const COLORS: [&str; 5] = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2"];

fn label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The chart as an SVG document.
pub(crate) fn render(chart: &Chart<'_>) -> String {
    let max = chart
        .groups
        .iter()
        .flat_map(|(_, v)| v.iter().flatten())
        .copied()
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let plot_h = HEIGHT - TOP - BOTTOM;
    let plot_w = WIDTH - LEFT - 20.0;
    let group_w = plot_w / chart.groups.len().max(1) as f64;
    let bar_w = (group_w * 0.8) / chart.series.len().max(1) as f64;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" \
         font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(s, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        s,
        "<text x=\"{}\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">{}</text>",
        WIDTH / 2.0,
        escape(chart.title)
    );
    let _ = writeln!(
        s,
        "<text x=\"14\" y=\"{}\" transform=\"rotate(-90 14 {})\" text-anchor=\"middle\">{}</text>",
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(chart.unit)
    );
    let base = TOP + plot_h;
    let _ = writeln!(
        s,
        "<line x1=\"{LEFT}\" y1=\"{base}\" x2=\"{}\" y2=\"{base}\" stroke=\"black\"/>",
        LEFT + plot_w
    );
    for (g, (name, values)) in chart.groups.iter().enumerate() {
        let x0 = LEFT + group_w * g as f64 + group_w * 0.1;
        for (i, v) in values.iter().enumerate() {
            let x = x0 + bar_w * i as f64;
            let color = COLORS[i % COLORS.len()];
            match v {
                Some(v) => {
                    let h = plot_h * v / max;
                    let _ = writeln!(
                        s,
                        "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\"/>",
                        base - h,
                        bar_w * 0.9
                    );
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">{}</text>",
                        x + bar_w * 0.45,
                        base - h - 3.0,
                        label(*v)
                    );
                }
                None => {
                    let _ = writeln!(
                        s,
                        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"10\">n/a</text>",
                        x + bar_w * 0.45,
                        base - 3.0
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            LEFT + group_w * (g as f64 + 0.5),
            base + 18.0,
            escape(name)
        );
    }
    for (i, series) in chart.series.iter().enumerate() {
        let y = HEIGHT - 40.0 + 16.0 * (i / 3) as f64;
        let x = LEFT + 220.0 * (i % 3) as f64;
        let _ = writeln!(
            s,
            "<rect x=\"{x}\" y=\"{}\" width=\"10\" height=\"10\" fill=\"{}\"/>\
             <text x=\"{}\" y=\"{}\">{}</text>",
            y - 9.0,
            COLORS[i % COLORS.len()],
            x + 14.0,
            y,
            escape(series)
        );
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_has_a_bar_per_measured_value_and_marks_the_missing() {
        let chart = Chart {
            title: "t <1>",
            unit: "ms",
            series: vec!["a", "b"],
            groups: vec![
                ("x", vec![Some(2.0), None]),
                ("y", vec![Some(4.0), Some(1.0)]),
            ],
        };
        let svg = render(&chart);
        assert_eq!(
            svg.matches("<rect x=").count(),
            3 + 2,
            "three bars, two legend boxes"
        );
        assert_eq!(svg.matches(">n/a<").count(), 1);
        assert!(svg.contains("t &lt;1&gt;"));
        // The tallest bar fills the plot.
        assert!(svg.contains(&format!("height=\"{:.1}\"", HEIGHT - TOP - BOTTOM)));
    }
}
