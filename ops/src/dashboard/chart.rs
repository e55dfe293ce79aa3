//! Small charts drawn on the server as SVG: no script, nothing fetched.

use maud::{Markup, PreEscaped, html};

/// A bar chart of two series per day (`(label, a, b)`), bars side by side.
pub(super) fn bars(title: &str, legend: (&str, &str), days: &[(String, i64, i64)]) -> Markup {
    const WIDTH: i64 = 640;
    const HEIGHT: i64 = 160;
    const PAD: i64 = 20;
    let max = days
        .iter()
        .map(|(_, a, b)| (*a).max(*b))
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = (WIDTH - 2 * PAD) / (days.len().max(1) as i64);
    let bar = (slot / 2 - 2).max(1);
    let height = |n: i64| n * (HEIGHT - 2 * PAD) / max;
    let mut svg = String::new();
    for (i, (label, a, b)) in days.iter().enumerate() {
        let x = PAD + i as i64 * slot;
        for (offset, value, class) in [(0, *a, "a"), (bar + 1, *b, "b")] {
            let h = height(value);
            svg.push_str(&format!(
                r#"<rect class="{class}" x="{}" y="{}" width="{bar}" height="{h}"><title>{} {value}</title></rect>"#,
                x + offset,
                HEIGHT - PAD - h,
                maud::html! { (label) }.into_string()
            ));
        }
        if i % 2 == 0 {
            let short: String = label.chars().skip(5).collect();
            svg.push_str(&format!(
                r#"<text x="{x}" y="{}" font-size="9">{short}</text>"#,
                HEIGHT - 4
            ));
        }
    }
    svg.push_str(&format!(
        r#"<text x="{PAD}" y="12" font-size="10">max {max}</text>"#
    ));
    html! {
        figure.chart {
            figcaption { (title) " — " span.a { "■ " (legend.0) } " " span.b { "■ " (legend.1) } }
            svg width=(WIDTH) height=(HEIGHT) viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img" aria-label=(title) {
                (PreEscaped(svg))
            }
        }
    }
}
