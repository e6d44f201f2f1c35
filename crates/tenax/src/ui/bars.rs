//! Bar charts of activity over time (jobs done and failed per minute or hour), as inline SVG.
//! The policy charts come from [`crate::chart`]; these are plain bars a page can draw by
//! itself.

use maud::{Markup, html};
use tenax_core::engine::activity::Counts;

/// One bar: its label (a tooltip) and counts.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub counts: Counts,
}

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 140.0;

/// Stacked bars: completed and delivered at the bottom, failed runs above, on a shared scale.
pub fn chart(title: &str, bars: &[Bar]) -> Markup {
    let done = |c: &Counts| c.completed + c.delivered;
    let failed = |c: &Counts| c.failed + c.delivery_failed;
    let top = bars
        .iter()
        .map(|b| done(&b.counts) + failed(&b.counts))
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = WIDTH / bars.len().max(1) as f64;
    let scale = (HEIGHT - 14.0) / top as f64;
    html! {
        figure.bars {
            figcaption { (title) " " span.legend { span.done { "■ done" } " " span.failed { "■ failed" } } " " span.muted { "(the tallest bar: " (top) ")" } }
            svg viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) preserveAspectRatio="none" role="img" aria-label=(title) {
                @for (i, bar) in bars.iter().enumerate() {
                    @let x = i as f64 * slot;
                    @let d = done(&bar.counts) as f64 * scale;
                    @let f = failed(&bar.counts) as f64 * scale;
                    g {
                        title { (bar.label) ": " (done(&bar.counts)) " done, " (failed(&bar.counts)) " failed, " (bar.counts.enqueued) " enqueued, " (bar.counts.dead) " dead" }
                        rect.done x=(fmt(x)) y=(fmt(HEIGHT - d)) width=(fmt((slot - 1.0).max(0.5))) height=(fmt(d)) {}
                        rect.failed x=(fmt(x)) y=(fmt(HEIGHT - d - f)) width=(fmt((slot - 1.0).max(0.5))) height=(fmt(f)) {}
                    }
                }
            }
        }
    }
}

fn fmt(v: f64) -> String {
    format!("{v:.1}")
}
