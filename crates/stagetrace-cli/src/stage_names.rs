//! Stage names as users type them on the command line (`compare --stage`,
//! `tail --stage`): a figure's own name or record name, or the span names
//! the docs tell them to write (`transport`, `call`).

use stagetrace_analyze::figures;
use stagetrace_schema::Figure;

/// The figures `names` name, in the order given; a name that is none is a
/// usage error that lists what is accepted.
pub(crate) fn parse(names: &[String]) -> Result<Vec<Figure>, String> {
    names
        .iter()
        .map(|n| {
            figures::from_user_name(n.trim())
                .filter(|f| figures::is_read(*f))
                .ok_or_else(|| {
                    let aliases: Vec<String> = figures::USER_NAMES
                        .iter()
                        .map(|(a, f)| format!("{a} (= {f})"))
                        .collect();
                    let known: Vec<&str> = figures::read().map(Figure::name).collect();
                    format!(
                        "--stage {n}: no such stage; use one of {}, or {}",
                        known.join(", "),
                        aliases.join(", ")
                    )
                })
        })
        .collect()
}
