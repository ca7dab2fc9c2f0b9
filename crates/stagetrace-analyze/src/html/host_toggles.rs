//! The checkboxes that add the host figures' curves to a plot: the curves
//! are there but hidden until ticked, with plain HTML and CSS (no script).

use std::fmt::Write as _;

use stagetrace_schema::Figure;

use super::palette::color;

/// The host figures' curves are hidden until their checkbox (before the
/// plot, in the same `div.plot`) is ticked: plain HTML and CSS, no script.
pub(super) fn css() -> String {
    let mut css =
        String::from(".host-curve{display:none}.plot label{margin-right:12px;font-size:12px}");
    for f in Figure::ALL.into_iter().filter(|f| f.is_host()) {
        let n = f.name();
        let _ = write!(
            css,
            ".plot input.h-{n}:checked~svg .c-{n}{{display:inline}}"
        );
    }
    css
}

/// The checkboxes that add the host figures' curves to a plot (none when
/// the run has no host figures); they precede the plot in its `div.plot`.
pub(super) fn checkboxes(s: &mut String, id: &str, host: &[Figure]) {
    if host.is_empty() {
        return;
    }
    let _ = write!(
        s,
        "<div class=\"host-toggles\">add the hosts' figures (they overlap the stages, docs/host.md): "
    );
    // Inputs are siblings of the svg (the CSS rule needs it); each label
    // names its figure in the curve's colour.
    let _ = writeln!(s, "</div>");
    for f in host {
        let n = f.name();
        let _ = writeln!(
            s,
            "<input type=\"checkbox\" id=\"{id}-{n}\" class=\"h-{n}\"><label for=\"{id}-{n}\"><span style=\"color:{}\">■</span> {n}</label>",
            color(*f)
        );
    }
}
